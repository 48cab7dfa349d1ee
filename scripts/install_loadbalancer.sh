#!/usr/bin/env bash
# Installs Debian's haproxy for the scale-out benchmark (bench/scaleout.py) and its
# tests: the load balancer in front of several web processes. Idempotent and fast
# when haproxy is already there. It is installed, never left running: the
# benchmark starts its own instance with a configuration of its own.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_loadbalancer: installing Debian's haproxy" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends haproxy >/dev/null
  # The package starts a system instance; the benchmark runs its own.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now haproxy >/dev/null 2>&1 || true; fi
  if command -v service >/dev/null 2>&1; then service haproxy stop >/dev/null 2>&1 || true; fi
  echo "install_loadbalancer: $(haproxy -v 2>/dev/null | head -1)" >&2
else
  echo "install_loadbalancer: haproxy is missing and this is not root; install the Debian package 'haproxy'" >&2
  exit 1
fi
