#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests (tests marked `browser`).
# Idempotent and fast when /usr/bin/chromium is already there. Playwright's own
# browser download does not work on a closed network, so the tests drive this one.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_test_browser: installing Debian's chromium for the browser tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
  if [ -x /usr/bin/chromium ]; then
    echo "install_test_browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium installed)" >&2
  else
    echo "install_test_browser: chromium install did not produce /usr/bin/chromium; browser tests will be skipped" >&2
  fi
else
  echo "install_test_browser: /usr/bin/chromium is missing and this is not root; browser tests will be skipped" \
       "(install the Debian package 'chromium' to run them)" >&2
fi
