# Two entry points (README): `make run` and `make test`. Both create or reuse .venv and install
# what they need themselves, so they work on a fresh machine that has only python3.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: run test bench lint docs clean sb3-tests

$(PY):
	$(PYTHON) -m venv $(VENV)

# setup.py builds the optional C modules (the fused optimizer updates, the engine's backward loop,
# an MLP's elementwise loops and GAE, one C pass each);
# without a compiler the NumPy / Python paths run, with the same results
$(RUN_STAMP): pyproject.toml setup.py rlgrad/optim/_fused.c rlgrad/_engine.c rlgrad/_kernels.c rlgrad/_buffers.h rlgrad/_adam.h | $(PY)
	$(PY) -m pip install --quiet -e ".[rl]"
	touch $@

$(TEST_STAMP): pyproject.toml setup.py rlgrad/optim/_fused.c rlgrad/_engine.c rlgrad/_kernels.c rlgrad/_buffers.h rlgrad/_adam.h | $(PY)
	$(PY) -m pip install --quiet -e ".[dev,rl,compare,atari,ray,docs,mujoco,box2d]"
	touch $@

# Trains PPO on CartPole-v1 to a return of 500, evaluates it, prints the run directory and its plot.
run: $(RUN_STAMP)
	$(PY) -m rlgrad.cli demo

# -rs: every skipped test prints its reason (only what cannot be installed may skip)
test: $(TEST_STAMP)
	$(PY) -m pytest -rs

# Benchmarks compare against PyTorch / HIPS autograd / SB3 (installed by the test dependencies).
bench: $(TEST_STAMP)
	$(PY) bench/engine.py

# The documentation site (mkdocs.yml: docs/ and the API reference from the docstrings) into site/;
# --strict: a broken link, anchor or reference is an error (tests/project/test_docs.py builds it too)
$(DOCS_STAMP): pyproject.toml setup.py | $(PY)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $@

# NO_MKDOCS_2_WARNING: mkdocs-material's banner about MkDocs 2.0, printed on every build, is
# not about these docs (tests/project/test_docs.py builds with it set too)
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# SB3's and sb3-contrib's own tests (their sdists, imports rewritten to rlgrad.rl) against this
# checkout, a table per file (docs/dropin.md); not part of `make test`: it downloads and takes long
sb3-tests: $(TEST_STAMP)
	$(PY) bench/sb3_tests.py --suite both

# ruff, then mypy over the public modules (pyproject.toml's [tool.mypy]: what a user imports)
lint: $(TEST_STAMP)
	$(PY) -m ruff check rlgrad tests bench examples
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache build site *.egg-info rlgrad/optim/_fused*.so rlgrad/_engine*.so rlgrad/_kernels*.so
