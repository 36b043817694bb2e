# Everything runs from a project-local virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Matplotlib keeps its font cache here, in the environment, not in ~/.cache: a cache that another environment
# wrote (one whose bundled fonts have since been deleted) makes every figure warn on stderr, and nbval counts a
# warning as a changed output. `make test` builds the cache before the notebooks run.
export MPLCONFIGDIR := $(abspath $(VENV))/mplconfig
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
# The fast tier: tests/ without the lab, the browser and the book (tests/conftest.py marks them by file),
# and without nbval: it runs only the notebooks, and loading it takes seconds (nbformat and its imports).
# pytest-xdist runs them on every core (they pass in any order and in parallel).
FAST := tests -m "not lab and not browser and not book and not notebook and not slow" \
	-p no:nbval -o addopts="-ra --strict-markers" -n auto

.PHONY: help lab voila test check lint format system-deps notebooks book bench clean

## help: list the targets (the default)
help:
	@sed -n 's/^## /  make /p' $(MAKEFILE_LIST)

## lab: set up and open the lessons in JupyterLab
lab: $(VENV)/.lessons
	$(BIN)/jupyter lab notebooks/

# A closed tab's kernel is not shut down (Voila's shutdown request on unload is refused), so the server
# culls every kernel that has had no client and no activity for ten minutes, checking once a minute.
VOILA_CULL := --MappingKernelManager.cull_idle_timeout=600 --MappingKernelManager.cull_interval=60

## voila: serve the explorer as a standalone dashboard (no CDN needed: see share/jupyter/voila)
voila: $(VENV)/.lessons
	JUPYTER_PATH=$(CURDIR)/share/jupyter $(BIN)/voila --template=zero-offline $(VOILA_CULL) notebooks/05_explorer.ipynb

## test: set up and run everything: lint, then every test (unit, property, CLI, lab, browser, book, notebooks)
test: system-deps $(VENV)/.tests lint
	$(BIN)/python -c "import matplotlib.font_manager" 2>/dev/null
	$(BIN)/python -m pytest

## check: the fast tier while you work: unit, property, CLI and hygiene tests (no lab, browser, book or nbval)
check: $(VENV)/.tests
	$(BIN)/python -m pytest $(FAST)

## lint: check formatting and lint with ruff (configured in pyproject.toml)
lint: $(VENV)/.tests
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

## format: reformat with ruff and apply its safe fixes
format: $(VENV)/.tests
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## system-deps: check Chromium, npm, a C++ compiler (as root on Debian: install them; else say what is missing)
system-deps:
	$(PYTHON) tools/system_deps.py test

## notebooks: re-execute every lesson in place, deterministically, and refresh the navigation cells
notebooks: $(VENV)/.tests
	$(BIN)/python tools/execute_notebooks.py $(NOTEBOOKS)
	$(BIN)/python tools/navigation.py

## book: build the static site in _build/html (the first build needs npm and the npm registry; no CDN at view time)
book: $(VENV)/.tests
	$(PYTHON) tools/system_deps.py book
	$(BIN)/python tools/build_book.py

## bench: run the performance benchmarks
bench: $(VENV)/.tests
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/notebook_times.py
	$(BIN)/python benchmarks/widget_latency.py
	$(BIN)/python benchmarks/step_latency.py

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	touch $@

$(VENV)/.lessons: pyproject.toml $(VENV)/.created
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The lab extra brings the CPU build of torch and DeepSpeed, which pip builds from its source release
# (its setup.py needs no torch; DeepSpeed compiles its one C++ extension when the lab first runs).
$(VENV)/.tests: pyproject.toml $(VENV)/.created
	$(BIN)/python -m pip install --quiet -e ".[test,lab,book]"
	touch $@ $(VENV)/.lessons

## clean: remove the virtual environment, caches and build outputs
clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache _build .cache test-artifacts
