# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make run    - the service on the embedded default (PostgreSQL+pgvector, Redis under var/)
#   make test   - the whole test suite
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test lint stop token migrate bench-perf bench-quality bench-venv bench-peer bench-export-onnx reliability import-test-venv

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

test: setup import-test-venv
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

# Benchmark-only dependencies (mem0ai for the peer benchmark) live in .venv-bench, a venv
# layered over .venv (a .pth file), so their pins never change the service's packages.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'zz-memproj-venv.pth').write_text('$(abspath $(VENV))/lib/python3.11/site-packages\n')"
	$(BENCH_VENV)/bin/python -m pip install --quiet -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench-venv: $(BENCH_STAMP)

bench-peer: migrate bench-venv
	$(BENCH_VENV)/bin/python bench/peer_mem0.py

# The ONNX export of the packaged MiniLM (otherwise done on first use).
bench-export-onnx: setup
	$(PY) -c "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'memproj.settings.base'); django.setup(); from memory.embeddings import export_onnx; print(export_onnx())"

# Isolation, fuzzing, faults and load at full size on a private stack under
# var/reliability/ (tests/reliability/ runs the same at CI size). ARGS=--small for a quick pass.
reliability: setup
	$(PY) bench/reliability.py $(ARGS)

# The upstream systems the importer tests write real stores with (roampal, chromadb,
# mem0ai, langgraph-checkpoint-postgres, duckdb from PyPI; the official MCP memory
# server from npm) live in .venv-import, layered over .venv like .venv-bench, so
# their pins never change the service's packages.
IMPORT_VENV := .venv-import
IMPORT_STAMP := $(IMPORT_VENV)/.installed
MCP_MEMORY_SERVER := @modelcontextprotocol/server-memory@2026.8.31
# cognee's COGX modules only (tests/importers/upstream/cognee_cogx.py): see requirements-import-test.txt.
COGNEE := cognee==1.6.5

$(IMPORT_STAMP): requirements-import-test.txt $(STAMP)
	test -x $(IMPORT_VENV)/bin/python || $(PYTHON) -m venv $(IMPORT_VENV)
	$(IMPORT_VENV)/bin/python -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'zz-memproj-venv.pth').write_text('$(abspath $(VENV))/lib/python3.11/site-packages\n')"
	$(IMPORT_VENV)/bin/python -m pip install --quiet -r requirements-import-test.txt
	$(IMPORT_VENV)/bin/python -m pip install --quiet --no-deps $(COGNEE)
	npm install --silent --no-audit --no-fund --prefix $(IMPORT_VENV)/node $(MCP_MEMORY_SERVER)
	touch $(IMPORT_STAMP)

import-test-venv: $(IMPORT_STAMP)
