# dltutor — the course's entry points. `make lab` to learn, `make test` to check everything.
#   make lab                 set up (once) and open JupyterLab on course/
#   make lab HEADLESS=1      same, as a headless server: no browser; the URL with its token printed
#                            (HOST=0.0.0.0 PORT=8899 TOKEN=... to choose them; PORT=0: any free port)
#   make test                set up (once, with the test system packages) and run the whole suite
#   make bench               benchmarks (ratios measured side by side in one run)
#   make doctor              the environment table
#   make gpu-check           on a GPU node: every lab (--tiny, all GPUs) and notebook (fast mode),
#                            a record in docs/verified/ (PY=python3: a site Python with torch)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 0
# Empty: JupyterLab generates the token (once) and prints its own URL with it and the real port.
TOKEN ?=
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
ROOTFLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup setup-test lab test bench doctor clean-notebooks constraints gpu-check

setup:
	bash scripts/setup.sh

setup-test:
	bash scripts/setup.sh --test

# HEADLESS=1 prints one URL whose token is the server's. No TOKEN: JupyterLab generates it and
# prints that URL itself (with the port it bound). A TOKEN of yours JupyterLab would mask
# ("?token=..."), so the recipe prints the URL: the port is fixed first (PORT=0: a free one) and
# port_retries=0 keeps JupyterLab from moving to another port than the one printed.
lab: setup
ifeq ($(HEADLESS),1)
ifeq ($(strip $(TOKEN)),)
	@echo "JupyterLab (headless) on $(HOST); open the URL with the token that JupyterLab prints below"
	$(VENV)/bin/jupyter lab --no-browser --ip=$(HOST) --port=$(PORT) \
	  --ServerApp.root_dir=course $(ROOTFLAG)
else
	@port='$(PORT)'; \
	if [ "$$port" = 0 ]; then \
	  port=$$($(PY) -c 'import socket; s = socket.socket(); s.bind(("$(HOST)", 0)); print(s.getsockname()[1])') || exit 1; \
	fi; \
	case '$(HOST)' in 0.0.0.0|::|'') show=$$(hostname);; *) show='$(HOST)';; esac; \
	echo "JupyterLab (headless) on $(HOST):$$port; open http://$$show:$$port/lab?token=$(TOKEN)"; \
	set -x; exec $(VENV)/bin/jupyter lab --no-browser --ip=$(HOST) --port=$$port --ServerApp.port_retries=0 \
	  --IdentityProvider.token='$(TOKEN)' --ServerApp.root_dir=course $(ROOTFLAG)
endif
else
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=course $(ROOTFLAG)
endif

# Two workers (pytest-xdist): one computes while the other waits on a rank, a job or a timeout;
# tests/conftest.py keeps each file, and everything that uses the local Slurm, on one worker.
# TEST_WORKERS=0 runs everything in this one process. Run as root, every notebook runs as the Unix
# user dltutor-student, who owns neither .venv nor the course (tests/student_kernel.py).
test: setup-test
	DLTUTOR_FAST=1 $(PY) -m pytest tests course/notebooks --nbval-lax \
	  --nbval-cell-timeout=300 -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: setup
	$(PY) -m pip install -q -c constraints.txt -r bench/requirements.txt
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

doctor: setup
	$(PY) -m dltutor doctor

# No setup prerequisite: it must also run on an existing Python with torch (PY=python3).
gpu-check:
	$(PY) scripts/gpu_check.py $(GPU_CHECK_ARGS)

clean-notebooks:
	$(PY) scripts/strip_notebooks.py course/notebooks/*.ipynb

# After an upgrade that passed `make test`: pin what .venv now holds (see the header of the file).
constraints: setup
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
	  | grep -v "@ file" | grep -vi "^horovod"; } > constraints.txt.new && mv constraints.txt.new constraints.txt
