# benchlib: two commands do everything on a fresh machine.
#   make report  -> creates .venv if missing, runs params/default.yaml, writes reports/index.html
#   make test    -> creates .venv if missing, runs ruff, mypy and the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STUDY ?= params/default.yaml
PYTEST_ARGS ?=

.PHONY: install report screenshots test test-fast test-any-host lint clean-reports floor-test

install: $(VENV)/.benchlib-installed

# Re-installs when the dependency list or the pins change. TORCH_INDEX installs the pinned torch from
# another of PyTorch's wheel indexes first (a V100 or P100 needs .../whl/cu126: docs/gpu.md); the pin
# (2.14.1) admits its local build (2.14.1+cu126), so the install after it keeps that torch.
TORCH_INDEX ?=
$(VENV)/.benchlib-installed: pyproject.toml requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet -c requirements/constraints.txt --index-url $(TORCH_INDEX) \
		torch torchvision)
	$(PY) -m pip install --quiet -c requirements/constraints.txt -e ".[all,dev]"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (benchlib)" >/dev/null
	@touch $@

report: install
	$(VENV)/bin/benchlib study $(STUDY)
	@echo "Open reports/index.html"

# The report opened in headless Chromium: each page checked, a PNG of each under reports/screenshots/.
screenshots: install
	$(VENV)/bin/benchlib check-pages reports --screenshots reports/screenshots

# The 20 slowest tests are listed at the end: CI has to stay under 30 minutes with room for the floor test.
test: install lint
	$(PY) -m pytest -q --durations=20 $(PYTEST_ARGS)

# While working: everything but what is marked slow (studies, notebooks, SLURM, browser, several processes).
test-fast: install lint
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

# The fast suite as other machines see it: once as on a CPU without bf16 kernels (BENCHLIB_CPU_BF16=off fakes
# the probe, in every process the tests start), once beside a CPU-burning process per usable CPU, as on a busy
# host (tests/cpu_burner.py, stopped however pytest ends). What the machine lacks, or a quiet host a test needs,
# is a skip with the reason (-rs lists them), never a failure. Both runs always; it fails if either does. Not
# in `make test` or CI: it takes about three fast suites' time.
test-any-host: install lint
	@BENCHLIB_CPU_BF16=off $(PY) -m pytest -q -rs -m "not slow" $(PYTEST_ARGS); no_bf16=$$?; \
	$(PY) tests/cpu_burner.py & burner=$$!; \
	trap 'kill $$burner 2>/dev/null; wait $$burner 2>/dev/null' EXIT INT TERM; \
	$(PY) -m pytest -q -rs -m "not slow" $(PYTEST_ARGS); busy=$$?; \
	echo "test-any-host: pytest exit $$no_bf16 without bf16 kernels, $$busy beside a CPU burner"; \
	test $$no_bf16 -eq 0 && test $$busy -eq 0

# Lint and import order (ruff), types (mypy: strict on spec/, instruments/, roofline/, store/).
lint: install
	$(VENV)/bin/ruff check benchlib tests benchmarks
	$(VENV)/bin/mypy

clean-reports:
	rm -rf reports/*/ reports/index.html

# The oldest torch benchlib claims (pyproject.toml), in an environment pinned as a platform's kernel is
# (a Colab image's numpy, pandas, ipykernel, notebook and jupyter-server): benchlib installed into it as a
# user would (no constraints) must change none of those, then a smoke run, the one-call API, a small study
# through papermill and every test not marked slow. Not part of
# `make test` (it downloads ~3 GB once); CI runs it when the suite leaves the time (.ci/run).
FLOOR_TORCH ?= 2.5.1
FLOOR_VISION ?= 0.20.1
FLOOR_VENV ?= .venv-floor
PLATFORM_PINS ?= torch==$(FLOOR_TORCH) torchvision==$(FLOOR_VISION) numpy==2.0.2 pandas==2.2.2 ipykernel==6.17.1 \
	notebook==6.5.7 jupyter-server==1.16.0
# Every test not marked slow: the package at its floor does all the fast suite does (the tune extra's tests skip
# there with the reason: a core install has no optuna).
FLOOR_TESTS ?= tests
floor-test:
	rm -rf $(FLOOR_VENV) && $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet $(PLATFORM_PINS)
	$(FLOOR_VENV)/bin/python -m pip freeze --exclude-editable > $(FLOOR_VENV)/platform-before.txt
	$(FLOOR_VENV)/bin/python -m pip install --quiet -e ".[dev]"
	$(FLOOR_VENV)/bin/python -m pip freeze --exclude-editable > $(FLOOR_VENV)/platform-after.txt
	$(FLOOR_VENV)/bin/python tests/platform_kept.py $(FLOOR_VENV)/platform-before.txt $(FLOOR_VENV)/platform-after.txt
	$(FLOOR_VENV)/bin/python -c "import importlib.util as u; assert not any(u.find_spec(m) for m in \
		('optuna', 'jupyterlab')), 'a core install pulled an extra'"
	$(FLOOR_VENV)/bin/benchlib run --model resnet18 --data synthetic --batch-size 16 --steps 5 --no-save \
		--set latency_repeats=6 --set latency_budget_s=0
	rm -rf $(FLOOR_VENV)/smoke
	$(FLOOR_VENV)/bin/benchlib study params/smoke.yaml --results-root $(FLOOR_VENV)/smoke/results \
		--reports-root $(FLOOR_VENV)/smoke/reports
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not slow" $(FLOOR_TESTS)
