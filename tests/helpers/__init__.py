"""Helpers that several test modules share, imported as ``helpers.<module>`` (tests/ is on
``sys.path``: its conftest.py sits there). A test module imports helpers from here, never from
another test module."""
