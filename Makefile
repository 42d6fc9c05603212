# benchlib: two commands do everything on a fresh machine.
#   make report  -> creates .venv if missing, runs params/default.yaml, writes reports/index.html
#   make test    -> creates .venv if missing, runs ruff, mypy and the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STUDY ?= params/default.yaml
PYTEST_ARGS ?=

.PHONY: install report screenshots test lint clean-reports

install: $(VENV)/.benchlib-installed

# Re-installs when the dependency list or the pins change.
$(VENV)/.benchlib-installed: pyproject.toml requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(PY) -m pip install --quiet -c requirements/constraints.txt -e ".[dev]"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (benchlib)" >/dev/null
	@touch $@

report: install
	$(VENV)/bin/benchlib study $(STUDY)
	@echo "Open reports/index.html"

# The report opened in headless Chromium: each page checked, a PNG of each under reports/screenshots/.
screenshots: install
	$(PY) -m benchlib.pipeline.browser reports --screenshots reports/screenshots

test: install lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Lint and import order (ruff), types (mypy: strict on spec/, instruments/, roofline/, store/).
lint: install
	$(VENV)/bin/ruff check benchlib tests benchmarks
	$(VENV)/bin/mypy

clean-reports:
	rm -rf reports/*/ reports/index.html
