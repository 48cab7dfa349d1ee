"""`make stop` (python -m memproj.embedded stop) stops the embedded PostgreSQL and
Redis even when the package's handle list names processes that are long dead —
which it always does after `make run` or a test run (issue 15, item 7). And the
embedded servers authenticate every role and keep their files private, also
in a var/ an older version made (issue 23)."""

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
import psycopg
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
    # Alive for far longer than the stop can take on a loaded machine: only a kill ends it early.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        (var_dir / "redis.pid").write_text(str(bystander.pid))
        stopped = embedded("stop", var_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert "redis: not running (stale pid file removed)" in stopped.stdout
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


# --- authentication and private files (issue 23) ---------------------------------------------


def connect(var_dir: Path, user: str, password: str | None = None) -> psycopg.Connection:
    return psycopg.connect(host=str(var_dir / "pgdata"), dbname="memproj", user=user, password=password)


def world_or_group_readable(var_dir: Path) -> list[str]:
    names = ["appendonly.aof", "appendonlydir", "dump.rdb", "redis.log", "redis.pid", "secrets"]
    found = [p for name in names if (p := var_dir / name).exists()]
    found += [child for p in found if p.is_dir() for child in p.iterdir()]
    return [f"{p.name} {oct(p.stat().st_mode & 0o777)}" for p in found if p.stat().st_mode & 0o077]


PASSWORD_ROLES = ("memproj_owner", "postgres")  # the owner, the superuser


def password(var_dir: Path, role: str) -> str:
    return (var_dir / "secrets" / f"pg-{role}.password").read_text().strip()


def assert_every_role_authenticates(var_dir: Path) -> None:
    rules = [line.split() for line in (var_dir / "pgdata" / "pg_hba.conf").read_text().splitlines()]
    assert not [rule for rule in rules if rule and not rule[0].startswith("#") and "trust" in rule]
    for role in PASSWORD_ROLES:
        with pytest.raises(psycopg.OperationalError, match="password"):
            connect(var_dir, role, "")
        with connect(var_dir, role, password(var_dir, role)) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role,)
    # The service's role: the OS user of the process, no password.
    with connect(var_dir, "memproj_app") as conn:
        assert conn.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone() == (
            False,
            False,
        )
        for role in PASSWORD_ROLES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SET ROLE {role}")
            conn.rollback()


def test_every_role_authenticates_and_the_servers_files_are_private(var_dir):
    started = embedded("start", var_dir)
    assert started.returncode == 0, started.stderr
    assert_every_role_authenticates(var_dir)
    assert (var_dir / "secrets").stat().st_mode & 0o777 == 0o700
    assert world_or_group_readable(var_dir) == []
    assert (var_dir / "appendonly.aof").exists() or (var_dir / "appendonlydir").exists()


def test_a_var_dir_of_an_older_version_is_upgraded_in_place(var_dir):
    """A var/ made before: pg_hba.conf says trust, no password files, the Redis
    files readable by all. The next start moves it to passwords (reloading the
    running server) and makes the files private; the data stays."""
    assert embedded("start", var_dir).returncode == 0
    with connect(var_dir, "memproj_app") as conn:
        conn.execute("CREATE TEMP TABLE t (x int)")  # the server is up and the app role works
    # Back to what an older version left: initdb's trust, no secrets, 0644 files.
    (var_dir / "pgdata" / "pg_hba.conf").write_text(
        "local all all trust\nhost all all 127.0.0.1/32 trust\nlocal replication all trust\n"
    )
    (var_dir / "pgdata" / "pg_ident.conf").write_text("")
    with connect(var_dir, "postgres", password(var_dir, "postgres")) as conn:
        conn.execute("SELECT pg_reload_conf()")
    shutil.rmtree(var_dir / "secrets")
    with connect(var_dir, "postgres", "") as conn:  # trust: anyone is the superuser
        conn.execute("SELECT 1")
    for name in ("appendonly.aof", "redis.log"):
        (var_dir / name).chmod(0o644)
    pg_pid = postmaster_pid(var_dir)

    upgraded = embedded("start", var_dir)
    assert upgraded.returncode == 0, upgraded.stderr
    assert postmaster_pid(var_dir) == pg_pid  # reloaded, not restarted
    assert_every_role_authenticates(var_dir)
    assert world_or_group_readable(var_dir) == []
