"""The embedded PostgreSQL's postmaster.pid after an unclean stop, or copied
from another checkout: it names a live process that is not this data
directory's server. embedded_postgres took any live pid for a running server,
so a start did not start one (and failed in psql, a traceback), and
``make stop`` had pg_ctl signal that process: whatever program had the pid
since a crash or a container restart, or the other checkout's server."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from tests.memproj.test_embedded import embedded, postmaster_pid

pytestmark = pytest.mark.slow


@pytest.fixture
def var_dirs() -> Iterator[list[Path]]:
    made: list[Path] = []

    def make() -> Path:
        # Short path: Unix socket paths are limited to ~107 bytes.
        path = Path(tempfile.mkdtemp(prefix="mp-pid-"))
        path.chmod(0o755)
        made.append(path)
        return path

    yield [make(), make()]
    for path in made:
        embedded("stop", path)
        shutil.rmtree(path, ignore_errors=True)


def pid_file_naming(var_dir: Path, lines: list[str], pid: int) -> None:
    (var_dir / "pgdata" / "postmaster.pid").write_text("\n".join([str(pid), *lines[1:]]) + "\n")


def answers(var_dir: Path) -> bool:
    with psycopg.connect(host=str(var_dir / "pgdata"), dbname="memproj", user="memproj_app") as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def bystander_as(owner: str) -> subprocess.Popen[bytes]:
    """A process of the data directory's owner (pg_ctl runs as it, so could signal it)."""
    user = owner if os.geteuid() == 0 else None
    return subprocess.Popen(["sleep", "3600"], user=user)


def test_a_stale_pid_file_naming_another_process_neither_stops_it_nor_keeps_the_server_down(var_dirs):
    var_dir = var_dirs[0]
    assert embedded("start", var_dir).returncode == 0
    lines = (var_dir / "pgdata" / "postmaster.pid").read_text().splitlines()
    assert embedded("stop", var_dir).returncode == 0
    owner = pwd.getpwuid((var_dir / "pgdata").stat().st_uid).pw_name
    bystander = bystander_as(owner)
    try:
        # The server stopped uncleanly; its pid is some other program's now.
        pid_file_naming(var_dir, lines, bystander.pid)
        stopped = embedded("stop", var_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert f"stale postmaster.pid naming pid {bystander.pid}" in stopped.stdout
        assert bystander.poll() is None

        pid_file_naming(var_dir, lines, bystander.pid)
        started = embedded("start", var_dir)
        assert started.returncode == 0, started.stderr
        assert postmaster_pid(var_dir) != bystander.pid and answers(var_dir)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_var_dir_copied_from_a_running_checkout_gets_its_own_server(var_dirs):
    running, copy = var_dirs
    assert embedded("start", running).returncode == 0
    assert embedded("start", copy).returncode == 0
    assert embedded("stop", copy).returncode == 0
    theirs = postmaster_pid(running)
    # cp -a of a checkout while make run serves it: the copy's pid file is the other's.
    shutil.copy(running / "pgdata" / "postmaster.pid", copy / "pgdata" / "postmaster.pid")

    started = embedded("start", copy)
    assert started.returncode == 0, started.stderr
    ours = postmaster_pid(copy)
    assert ours != theirs and answers(copy)
    stopped = embedded("stop", copy)
    assert stopped.returncode == 0 and f"postgres: stopped (pid {ours})" in stopped.stdout, stopped.stdout
    # The other checkout's server was neither used nor stopped.
    assert psutil.pid_exists(theirs) and answers(running)
