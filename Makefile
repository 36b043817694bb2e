# Everything runs from a project-local virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))

.PHONY: lab voila test notebooks book bench clean

## lab: set up and open the lessons in JupyterLab
lab: $(VENV)/.lessons
	$(BIN)/jupyter lab notebooks/

## voila: serve the explorer as a standalone dashboard (no CDN needed: see share/jupyter/voila)
voila: $(VENV)/.lessons
	JUPYTER_PATH=$(CURDIR)/share/jupyter $(BIN)/voila --template=zero-offline notebooks/05_explorer.ipynb

## test: set up and run every test (unit, property, CLI, notebooks)
test: $(VENV)/.tests
	$(BIN)/python -m pytest

## notebooks: re-execute every lesson in place, deterministically, and refresh the navigation cells
notebooks: $(VENV)/.tests
	$(BIN)/python tools/execute_notebooks.py $(NOTEBOOKS)
	$(BIN)/python tools/navigation.py

## book: build the static site in _build/html from the executed notebooks (offline; no CDN at view time)
book: $(VENV)/.tests
	$(BIN)/python tools/build_book.py

## bench: run the performance benchmarks
bench: $(VENV)/.tests
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/notebook_times.py
	$(BIN)/python benchmarks/widget_latency.py

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

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis _build .cache test-artifacts
