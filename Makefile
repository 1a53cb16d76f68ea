# Two commands: `make demo` (the main job on the embedded MNIST) and `make test` (the suite).
# Each creates .venv if it is missing and installs the package with the tested dependency set (requirements.lock)
# first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
WORKDIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: demo test install bench results wheel clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# --no-compile: bytecode is written on first import instead, for the modules actually used (halves install time).
# This is CI's check that the lock installs (on CI's Python, the lowest README claims: tests/test_install.py) and
# that the installed set is consistent (pip check).
$(STAMP): pyproject.toml requirements.lock | $(PY)
	$(PY) -m pip install --quiet --no-compile -c requirements.lock -e '.[dev,dimred]'
	$(PY) -m pip check
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m experiments.risk_report --config=experiments/configs/risk_report.py:default --workdir=$(WORKDIR)

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder tests recon_jax $(PYTEST_ARGS)

# Regenerates one committed result: make results EXP=balle_mnist [VARIANT=default]. The run (with its caches and
# stores) lives in runs/results/EXP/VARIANT and resumes there; report, metrics, config and figures are copied to
# results/EXP/VARIANT once it has finished. RUNS=DIR puts the run elsewhere (e.g. a disk that outlives the checkout,
# so a multi-hour run resumes in a later session).
EXP ?=
VARIANT ?= default
RUNS ?= runs/results
results: $(STAMP)
	@test -n "$(EXP)" || { echo "usage: make results EXP=<experiment> [VARIANT=default]"; exit 2; }
	$(PY) -m experiments.$(EXP) --config=experiments/configs/$(EXP).py:$(VARIANT) --workdir=$(RUNS)/$(EXP)/$(VARIANT)
	$(PY) -c "from experiments.common import publish; print(publish('$(RUNS)/$(EXP)/$(VARIANT)', 'results/$(EXP)/$(VARIANT)'))"

bench: $(STAMP)
	$(PY) -m benchmarks.run

# The library wheel (dist/), e.g. to install in a notebook elsewhere. setuptools copies whatever an earlier build
# left in build/ into the wheel, so that directory goes first (it once shipped old top-level packages).
wheel: $(STAMP)
	rm -rf build
	$(PY) -m pip wheel --quiet --no-deps -w dist .

clean-venv:
	rm -rf $(VENV)
