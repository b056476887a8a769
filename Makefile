# Set-up and the two everyday jobs. `make run` and `make test` each build .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= collect,train,serve,dev

.PHONY: run test clean-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The torch pin first: on this workplace it is a CPU build on local disk, while a bare
	# 'torch' requirement could pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

# The main job on the embedded defaults: predict shipped models on the H200 with the shipped
# bundle (no GPU needed), then check the predictor against the measured zoo, leave-one-model-out.
run: $(VENV)/.installed
	$(VENV)/bin/latpred devices
	$(VENV)/bin/latpred predict resnet50 vit_b_16 bert-base gpt2 --device h200 --precision fp16 --mode cudagraph --batch 8
	$(VENV)/bin/latpred predict resnet50 vit_b_16 bert-base gpt2 --device h200 --precision fp16 --mode eager --batch 1
	$(VENV)/bin/latpred validate --device h200 --out runs/validate

test: $(VENV)/.installed
	$(PY) -m pytest -q

clean-venv:
	rm -rf $(VENV)
