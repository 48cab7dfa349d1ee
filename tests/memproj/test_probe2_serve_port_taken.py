"""``make run`` (python -m memproj.serve) on a port something else serves
(most often a ``make run`` already running): it started a Celery worker and a
second beat beside the other stack's (every periodic task sent twice) and a
web process that could only fail to bind, restarted for ever. Now it says the
port is taken and starts nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_make_run_on_a_taken_port_says_so_and_starts_nothing():
    with socket.create_server(("127.0.0.1", 0)) as other_server:  # listening, as a running make run's web
        port = other_server.getsockname()[1]
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("CELERY_", "DATABASE_URL", "MEMPROJ_TEST", "PYTEST", "DJANGO_SETTINGS"))
        }
        # Nothing reachable: a stack that did start would touch no one's data.
        env.update(
            DJANGO_SETTINGS_MODULE="memproj.settings.base",
            PORT=str(port),
            DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
            CELERY_BROKER_URL="redis://127.0.0.1:1/0",
            PYTHONPATH=str(ROOT),
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "memproj.serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            children = [child.cmdline() for child in psutil.Process(proc.pid).children()]
            os.killpg(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=60)
            pytest.fail(f"memproj.serve kept running on a taken port, with children {children}")
    assert proc.returncode == 2, (out, err)
    assert f"cannot serve on 127.0.0.1:{port}" in err and "nothing started" in err, err
    assert "Traceback" not in err and "started" not in out
