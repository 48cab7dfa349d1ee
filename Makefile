# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make run    - the service on the embedded default (PostgreSQL+pgvector, Redis under var/)
#   make test   - the whole test suite
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test lint stop token migrate bench-perf bench-quality reliability

$(STAMP): requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py bootstrap
	$(PY) -m memproj.serve

test: setup
	scripts/test.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

token: migrate
	$(PY) manage.py issue_token --tenant $(TENANT) --principal $(PRINCIPAL)

stop:
	$(PY) -m memproj.embedded stop

bench-perf: migrate
	$(PY) bench/perf.py

bench-quality: migrate
	$(PY) bench/quality.py

# Isolation, fuzzing, faults and load at full size on a private stack under
# var/reliability/ (tests/reliability/ runs the same at CI size). ARGS=--small for a quick pass.
reliability: setup
	$(PY) bench/reliability.py $(ARGS)
