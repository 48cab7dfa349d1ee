#!/usr/bin/env bash
# The test command behind `make test` and .ci/run. Fails when no test ran.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ -x scripts/install_test_browser.sh ]; then scripts/install_test_browser.sh; fi
# Debian's haproxy for the scale-out tests (tests/perf_scaleout/, skipped without it).
if [ -x scripts/install_loadbalancer.sh ]; then scripts/install_loadbalancer.sh || true; fi
# Two pytest-xdist workers, each with its own test database (test_memproj_gw0, ...):
# the long tests that mostly wait on other processes (bench scripts, Celery
# workers, MCP servers, the browser) overlap with the rest. MEMPROJ_TEST_WORKERS=0
# runs everything in this one process.
WORKERS="${MEMPROJ_TEST_WORKERS:-2}"
PARALLEL=()
if [ "$WORKERS" != "0" ]; then PARALLEL=(-n "$WORKERS" --dist loadgroup); fi
set +e
"$PY" -m pytest "${PARALLEL[@]}" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest ran no test: failing on purpose" >&2
  exit 1
fi
exit "$status"
