# `make quickstart`: set up .venv and run the main job on the built-in default model.
# `make test`: the test suite (what CI runs). Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# No GPU here: pin the CPU build of torch (on this workplace's machines it installs from local disk).
TORCH_CPU := torch==2.13.0

.PHONY: quickstart test quality style install

$(BIN)/cugraph-accel: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
		echo "GPU found: installing torch with CUDA"; $(BIN)/pip install -q torch; \
	else \
		echo "no GPU found: installing the CPU build of torch ($(TORCH_CPU))"; $(BIN)/pip install -q $(TORCH_CPU); \
	fi
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

install: $(BIN)/cugraph-accel

quickstart: install
	$(BIN)/cugraph-accel capture && $(BIN)/cugraph-accel verify
	@echo "next: run 'source $(VENV)/bin/activate' to put cugraph-accel on your PATH (or call $(BIN)/cugraph-accel); then cugraph-accel --help"

test: install
	$(BIN)/python -m pytest

quality: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

style: install
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .
