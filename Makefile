# dltutor — the course's entry points. `make lab` to learn, `make test` to check everything.
#   make lab                 set up (once) and open JupyterLab on course/
#   make lab HEADLESS=1      same, as a headless server: no browser; host, port and token printed
#   make test                set up (once, with the test system packages) and run the whole suite
#   make bench               benchmarks (ratios measured side by side in one run)
#   make doctor              the environment table
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 0
TOKEN ?= $(shell python3 -c "import secrets; print(secrets.token_hex(16))")
PYTEST_ARGS ?=
ROOTFLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup setup-test lab test bench doctor clean-notebooks

setup:
	bash scripts/setup.sh

setup-test:
	bash scripts/setup.sh --test

lab: setup
ifeq ($(HEADLESS),1)
	@echo "JupyterLab (headless) on $(HOST); open the URL printed below (token: $(TOKEN))"
	$(VENV)/bin/jupyter lab --no-browser --ip=$(HOST) --port=$(PORT) \
	  --IdentityProvider.token=$(TOKEN) --ServerApp.root_dir=course $(ROOTFLAG)
else
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=course $(ROOTFLAG)
endif

test: setup-test
	DLTUTOR_FAST=1 $(PY) -m pytest tests course/notebooks --nbval-lax \
	  --nbval-cell-timeout=300 -p no:cacheprovider $(PYTEST_ARGS)

bench: setup
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

doctor: setup
	$(PY) -m dltutor doctor

clean-notebooks:
	$(PY) scripts/strip_notebooks.py course/notebooks/*.ipynb
