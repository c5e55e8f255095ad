# KernelZero: `make run` sets up and runs the flywheel; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup run test bench schemas clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU machines get the local CPU wheel; elsewhere PyPI's default (CUDA) build.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[ml,dev]"
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq bubblewrap) || echo "note: install bubblewrap for the strongest verifier sandbox"; }
	touch $(STAMP)

run: setup
	$(VENV)/bin/kz run --rounds $${ROUNDS:-1} --challenges $${CHALLENGES:-4}

test: setup
	$(PY) -m pytest -q -W ignore::DeprecationWarning

bench: setup
	$(PY) benchmarks/pipeline.py

schemas: setup
	$(PY) -m schemas.export

clean:
	rm -rf $(VENV) var .pytest_cache
