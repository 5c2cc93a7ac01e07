# The two commands a newcomer needs: `make demo` (the main job) and `make test`.
# Both create .venv with pip when it is missing. TORCH_SPEC pins the torch build
# this machine kind has on disk; override it on another box, e.g.
#   make install TORCH_SPEC="torch torchvision"
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.stalesim-installed
# lab/ (the tables, the GPU reproduction, the GPU campaign) is repository tooling, not installed:
# its targets run with this tree first on PYTHONPATH, so they import lab and this tree's stalesim
LAB_ENV = PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: install demo test test-fast test-integration test-e2e lint docs bench figures tables notebooks reproduce-gpu reproduce-gpu-plan gpu-check gpu-check-dry clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: install
	$(PY) -m stalesim demo

# TEST_WORKERS: pytest-xdist workers (2, the default: this machine kind's cores, one compute thread
# each); 0 runs a tier in one process. loadfile keeps a file's tests on one worker (a module fixture runs once);
# the few tests that bound a wall time run alone (tests/_parallel.py). tests/README.md says how.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: install
	$(PYTEST)

# the edit loop: the unit tier (no process started, nothing trained beyond a few steps; a few
# minutes on 2 cores). make test-integration / test-e2e run the other tiers alone.
test-fast: install
	$(PYTEST) tests/unit

test-integration: install
	$(PYTEST) tests/integration

test-e2e: install
	$(PYTEST) tests/e2e

# ruff (rules in pyproject.toml) on all code; mypy on the package (the
# configuration and its per-module exceptions, with their reasons, are in pyproject.toml)
lint: install
	$(VENV)/bin/ruff check stalesim lab tests benchmarks experiments notebooks/build_notebooks.py notebooks/run_notebooks.py
	$(VENV)/bin/mypy

# the API reference from the docstrings (docs/api/, Sphinx autodoc) into build/docs/api/index.html;
# warnings are errors, as in CI. -E re-reads every page: autodoc does not track the package's
# sources, so a cached page would hide a docstring changed since the last build.
docs: install
	$(VENV)/bin/sphinx-build -E -W --keep-going -q -b html docs/api build/docs/api

# the maintained benchmarks (the list in benchmarks/__main__.py) at their smallest sizes: every one
# still runs, a few minutes on 2 cores; BENCH_ARGS= for their full sizes (far longer: run it on a quiet
# machine), BENCH_ARGS="--quick sim scale" for some of them
BENCH_ARGS ?= --quick
bench: install
	$(PY) -m benchmarks $(BENCH_ARGS)

figures: install
	$(PY) -m stalesim figures --out figures

# build the six notebooks and execute them in place, as committed (short mode, a few minutes on 2
# cores; NB=02 for one, NB_FULL=1 for full mode: about an hour). A relative $$STALESIM_DATA is
# taken from here.
notebooks: install
	$(PY) notebooks/run_notebooks.py $(NB) $(if $(NB_FULL),--full)

# regenerate docs/RESULTS.md's tables from the stored artifacts (tests check they are equal)
tables: install
	$(LAB_ENV) $(PY) -m lab.reproduce tables --write

# the stale-weights paper's CIFAR-10 experiments on one GPU (and its 2-GPU table when two GPUs
# are visible); resumable, prints a time estimate first. See docs/reproduce-gpu.md.
reproduce-gpu: install
	$(LAB_ENV) $(PY) -m lab.reproduce gpu $(REPRODUCE_ARGS)

# the plan and the time estimate only; no GPU needed for a named class:
# make reproduce-gpu-plan GPU=a100-40gb-sxm (or REPRODUCE_ARGS="--gpu a100-40gb-sxm --jobs 4")
reproduce-gpu-plan: install
	$(LAB_ENV) $(PY) -m lab.reproduce gpu --dry-run $(if $(GPU),--gpu $(GPU)) $(REPRODUCE_ARGS)

# every CUDA path in one campaign, in parts of at most 9 minutes (make gpu-check PART=1, 2, 3 on a
# machine that caps a command at 10 minutes); results in docs/results/gpu-check-<gpu>/. No install
# step: a lent GPU machine has torch but no registry, so this runs the tree with the venv's python
# where there is one, else python3. See docs/gpu-check.md.
GPU_CHECK_PY = $(if $(wildcard $(PY)),$(PY),python3)
gpu-check:
	$(LAB_ENV) $(GPU_CHECK_PY) -m lab.gpucheck $(if $(PART),--part $(PART)) $(GPU_CHECK_ARGS)

# the same plan on the CPU: budgets, command lines, and every step in a tiny CPU variant (CI runs it)
gpu-check-dry:
	$(LAB_ENV) $(GPU_CHECK_PY) -m lab.gpucheck --dry $(GPU_CHECK_ARGS)

clean:
	rm -rf build *.egg-info .pytest_cache
