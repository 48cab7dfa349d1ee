#!/usr/bin/env bash
# The test command behind `make test` and .ci/run. Fails when no test ran.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ -x scripts/install_test_browser.sh ]; then scripts/install_test_browser.sh; fi
set +e
"$PY" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest ran no test: failing on purpose" >&2
  exit 1
fi
exit "$status"
