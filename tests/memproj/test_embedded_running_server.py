"""A process that finds the embedded PostgreSQL already running never restarts
it, whatever its own MEMPROJ_PG_SHARED_BUFFERS says (a management command run
from a shell with another value must not restart the server under the running
service): the running value wins, with a warning. Tuning happens when a
process starts the server itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.memproj.test_embedded import embedded, password, postmaster_pid

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def start(var_dir: Path, shared_buffers: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from memproj.embedded import ensure_postgres; ensure_postgres()"],
        cwd=ROOT,
        env=dict(
            os.environ, MEMPROJ_VAR_DIR=str(var_dir), MEMPROJ_PG_SHARED_BUFFERS=shared_buffers, PYTHONPATH=str(ROOT)
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )


def server_state(var_dir: Path) -> tuple[str, object]:
    with psycopg.connect(
        host=str(var_dir / "pgdata"), dbname="memproj", user="postgres", password=password(var_dir, "postgres")
    ) as conn:
        row = conn.execute("SELECT current_setting('shared_buffers'), pg_postmaster_start_time()").fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.fixture
def var_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mp-tune-"))
    path.chmod(0o755)
    yield path
    embedded("stop", path)
    shutil.rmtree(path, ignore_errors=True)


def test_a_process_finding_the_server_running_never_restarts_it(var_dir):
    first = start(var_dir, "16MB")
    assert first.returncode == 0, first.stderr
    pid = postmaster_pid(var_dir)
    setting, started_at = server_state(var_dir)
    assert setting == "16MB"  # the process that started it tuned it

    other = start(var_dir, "24MB")  # e.g. `manage.py export` from a shell with another value

    assert other.returncode == 0, other.stderr
    assert postmaster_pid(var_dir) == pid
    assert server_state(var_dir) == ("16MB", started_at)  # not restarted: the running value wins
    assert "MEMPROJ_PG_SHARED_BUFFERS" in other.stderr and "24MB" in other.stderr and "16MB" in other.stderr

    same = start(var_dir, "16MB")
    assert same.returncode == 0 and "MEMPROJ_PG_SHARED_BUFFERS" not in same.stderr

    # A new value takes effect when the server is started again.
    embedded("stop", var_dir)
    restarted = start(var_dir, "24MB")
    assert restarted.returncode == 0, restarted.stderr
    assert server_state(var_dir)[0] == "24MB"
