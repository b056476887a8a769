# Set-up and the two everyday jobs. `make run` and `make test` each build .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= collect,dev

.PHONY: run test clean-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The torch pin first: on this workplace it is a CPU build on local disk, while a bare
	# 'torch' requirement could pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

# The main job on the embedded defaults: fingerprint this machine's device, measure a one-minute
# operator sweep on it into runs/, and write that dataset's card. Rerunning resumes the sweep.
run: $(VENV)/.installed
	$(VENV)/bin/latpred device
	mkdir -p runs && cp datasets/layer_shapes.json runs/
	$(VENV)/bin/latpred collect ops --out runs --target 2000 --budget-s 60 --max-bytes 3e7 --max-flops 3e9
	for d in runs/*/; do $(VENV)/bin/latpred collect card $$d && sed -n '/^## Operator rows/,/^## Whole/p' $$d/README.md; done

test: $(VENV)/.installed
	$(PY) -m pytest -q

clean-venv:
	rm -rf $(VENV)
