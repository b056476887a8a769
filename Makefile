# Set-up and the everyday jobs. `make run`, `make test` and `make lint` each build .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= collect,train,serve,dev

.PHONY: run demo test lint clean-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The torch pin first: on this workplace it is a CPU build on local disk, while a bare
	# 'torch' requirement could pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

# The main job on the embedded defaults: the REST service under gunicorn (gevent workers, no
# preload) on http://127.0.0.1:8000, serving the shipped H200 bundle (no GPU needed).
# LATPRED_BIND=host:port moves it; service/gunicorn_conf.py and service/config.py list the settings.
# Reads only, unless started with a key (LATPRED_API_KEY=... make run) or LATPRED_OPEN_WRITES=1;
# stored graphs and host profiles go to ~/.local/share/latpred (LATPRED_DATA_DIR).
run: $(VENV)/.installed
	$(VENV)/bin/gunicorn -c service/gunicorn_conf.py service.wsgi:app

# The command-line tour: predict shipped models on the H200, then check the predictor against
# the measured zoo, leave-one-model-out, beside the roofline and FLOPs baselines.
demo: $(VENV)/.installed
	$(VENV)/bin/latpred devices
	$(VENV)/bin/latpred predict resnet50 vit_b_16 bert-base gpt2 --device h200 --precision fp16 --mode cudagraph --batch 8
	$(VENV)/bin/latpred predict resnet50 vit_b_16 bert-base gpt2 --device h200 --precision fp16 --mode eager --batch 1
	$(VENV)/bin/latpred validate --device h200 --out runs/validate

test: $(VENV)/.installed
	$(PY) -m pytest -q

# ruff and mypy, as configured in pyproject.toml (mypy's `files` names what it checks).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean-venv:
	rm -rf $(VENV)
