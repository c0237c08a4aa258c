"""Stable-Baselines3's ``stable_baselines3.common`` module paths: thin re-exports, so that
``from stable_baselines3.common.X import Y`` becomes ``from rlgrad.rl.common.X import Y``."""
