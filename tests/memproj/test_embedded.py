"""`make stop` (python -m memproj.embedded stop) stops the embedded PostgreSQL and
Redis even when the package's handle list names processes that are long dead —
which it always does after `make run` or a test run (issue 15, item 7)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def embedded(command: str, var_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memproj.embedded", command],
        cwd=ROOT,
        env=dict(os.environ, MEMPROJ_VAR_DIR=str(var_dir), MEMPROJ_PG_SHARED_BUFFERS="16MB", PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def var_dir() -> Iterator[Path]:
    # Short path: Unix socket paths are limited to ~107 bytes.
    path = Path(tempfile.mkdtemp(prefix="mp-stop-"))
    path.chmod(0o755)
    yield path
    embedded("stop", path)
    shutil.rmtree(path, ignore_errors=True)


def postmaster_pid(var_dir: Path) -> int:
    return int((var_dir / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def test_stop_stops_postgres_and_redis_despite_dead_handle_pids(var_dir):
    started = embedded("start", var_dir)
    assert started.returncode == 0, started.stderr
    pg_pid = postmaster_pid(var_dir)
    redis_pid = int((var_dir / "redis.pid").read_text())
    assert psutil.pid_exists(pg_pid) and psutil.pid_exists(redis_pid)

    # The start command registered its own pid and exited: the list now holds a
    # dead pid, as after any `make run`. Add another dead one for good measure.
    handles = var_dir / "pgdata" / ".handle_pids.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pids = json.loads(handles.read_text()) + [int(dead.stdout)]
    handles.write_text(json.dumps(pids))
    assert pids and not any(psutil.pid_exists(p) for p in pids)

    stopped = embedded("stop", var_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert f"postgres: stopped (pid {pg_pid})" in stopped.stdout
    assert f"redis: stopped (pid {redis_pid})" in stopped.stdout
    assert not psutil.pid_exists(pg_pid)
    assert not psutil.pid_exists(redis_pid)
    assert not (var_dir / "pgdata" / "postmaster.pid").exists()

    again = embedded("stop", var_dir)
    assert again.returncode == 0 and "postgres: not running" in again.stdout and "redis: not running" in again.stdout

    # And the next start finds a stopped server and starts it again.
    restarted = embedded("start", var_dir)
    assert restarted.returncode == 0, restarted.stderr
    assert psutil.pid_exists(postmaster_pid(var_dir))


def test_a_stale_redis_pid_file_naming_another_process_is_not_killed(var_dir):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (var_dir / "redis.pid").write_text(str(bystander.pid))
        stopped = embedded("stop", var_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert "redis: not running (stale pid file removed)" in stopped.stdout
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
