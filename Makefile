# `make quickstart`: set up .venv and run the main job on the built-in default model.
# `make test`: the fast test tier (minutes on two cores; every module of the package and the CLI).
# `make test-all`: both tiers, the exhaustive one adding the sweeps, the whole zoo and the sm_90 compile checks
# (tests/tiers.py lists it). Each target creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Without a GPU: pin the CPU build of torch.
TORCH_CPU := torch==2.13.0

.PHONY: quickstart test test-all quality style install

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
	$(BIN)/cugraph-accel capture --force --plan $(VENV)/quickstart.plan.yaml && $(BIN)/cugraph-accel verify --plan $(VENV)/quickstart.plan.yaml
	@echo "next: run 'source $(VENV)/bin/activate' to put cugraph-accel on your PATH (or call $(BIN)/cugraph-accel); then cugraph-accel --help"

# The tests run in one process per CPU core (pytest-xdist; WORKERS=0: in this process alone); the GPU tests
# share one worker (conftest.py), so they never meet on one device.
WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup

test: install
	$(PYTEST) -m "not exhaustive"

# CUGRAPH_ACCEL_FULL_ZOO: the zoo test over every decoder type, not only its representative subset.
test-all: install
	CUGRAPH_ACCEL_FULL_ZOO=1 $(PYTEST)

quality: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

style: install
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .
