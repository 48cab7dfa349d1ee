"""`make run`: the web app (admin + MCP HTTP), a Celery worker and beat, as
child processes of this one. A child that dies is started again after a
backoff (1 s, 2 s, 4 s ... capped), while the others keep serving; Ctrl-C or
SIGTERM stops all of them. The embedded PostgreSQL and Redis keep running
(`make stop` stops them)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from memproj.embedded import VAR_DIR
from memproj.settings.environment import read

PROCESSES = {
    # memproj.serve web: uvicorn with the settings of MEMPROJ_HTTP (web() below).
    "web": [sys.executable, "-m", "memproj.serve", "web"],
    "worker": [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "memproj",
        "worker",
        "--loglevel=INFO",
        f"--concurrency={read('MEMPROJ_WORKER_CONCURRENCY')}",
    ],
    "beat": [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "memproj",
        "beat",
        "--loglevel=INFO",
        "--schedule",
        str(VAR_DIR / "celerybeat-schedule"),
    ],
}


# Celery's worker warns at length when it runs as root (its tasks would have
# root's rights). As root, memproj.serve says so in one line of its own instead.
CELERY_ROOT_WARNING = "You're running the worker with superuser privileges"
RUNNING_AS_ROOT = (
    "running as root: the worker's tasks have root's rights, which is fine in a disposable container or VM; "
    "elsewhere run make run as an ordinary user (the embedded PostgreSQL runs as its own user either way)"
)


def commands_for(euid: int, processes: Mapping[str, Sequence[str]] = PROCESSES) -> dict[str, list[str]]:
    """The children's commands for this user: as root, the worker runs with
    Celery's root warning filtered out (``RUNNING_AS_ROOT`` replaces it)."""
    commands = {name: list(command) for name, command in processes.items()}
    if euid == 0 and "worker" in commands:
        commands["worker"][1:1] = ["-W", f"ignore:{CELERY_ROOT_WARNING}"]
    return commands


@dataclass
class Child:
    name: str
    command: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    # Consecutive crashes that happened soon after a start; drives the backoff.
    crashes: int = 0
    restart_at: float | None = None
    restarts: int = field(default=0)


class Supervisor:
    """Keeps every child running. A crash is logged and the child alone is
    restarted after ``min(backoff_base * 2**(n-1), backoff_max)`` seconds, n being
    its consecutive early crashes; a child that stayed up ``stable_after`` seconds
    starts again from the base delay. A crash loop therefore costs a process
    start every ``backoff_max`` seconds at most, and one crashing part never
    takes the others down."""

    def __init__(
        self,
        processes: Mapping[str, Sequence[str]],
        *,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        stable_after: float = 60.0,
        stop_timeout: float = 15.0,
        poll_interval: float = 0.2,
    ) -> None:
        self.children = {name: Child(name, list(cmd)) for name, cmd in processes.items()}
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self.stop_timeout = stop_timeout
        self.poll_interval = poll_interval
        self.stopping = False

    def log(self, message: str) -> None:
        print(f"memproj: {message}", flush=True)

    def start(self, child: Child) -> None:
        child.process = subprocess.Popen(child.command)
        child.started_at = time.monotonic()
        child.restart_at = None

    def backoff(self, crashes: int) -> float:
        return float(min(self.backoff_base * 2 ** max(crashes - 1, 0), self.backoff_max))

    def check(self) -> None:
        """One pass of the loop: notice exits, schedule and perform restarts."""
        now = time.monotonic()
        for child in self.children.values():
            if child.restart_at is not None:
                if now >= child.restart_at and not self.stopping:
                    child.restarts += 1
                    self.start(child)
                    assert child.process is not None
                    self.log(f"{child.name} restarted (pid {child.process.pid}, restart {child.restarts})")
                continue
            if child.process is None or child.process.poll() is None:
                continue
            uptime = now - child.started_at
            child.crashes = 1 if uptime >= self.stable_after else child.crashes + 1
            delay = self.backoff(child.crashes)
            child.restart_at = now + delay
            self.log(
                f"{child.name} (pid {child.process.pid}) exited with {child.process.returncode} after "
                f"{uptime:.1f} s; restarting it in {delay:g} s, the others keep running"
            )

    def stop(self) -> None:
        """Terminate every child, then kill what has not exited in time."""
        self.stopping = True
        running = [c.process for c in self.children.values() if c.process is not None and c.process.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + self.stop_timeout
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def run(self) -> None:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            # Only a flag: raising here could interrupt a Popen half-way and
            # orphan the child it was starting. The loop notices within one poll.
            self.stopping = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            for child in self.children.values():
                self.start(child)
            pids = ", ".join(f"{c.name} pid {c.process.pid}" for c in self.children.values() if c.process)
            self.log(f"started {pids}")
            while not self.stopping:
                self.check()
                time.sleep(self.poll_interval)
        finally:
            self.stop()


def web(host: str | None = None, port: int | None = None) -> None:
    """The web process: uvicorn serving memproj.asgi with the edge settings of
    MEMPROJ_HTTP (memproj/settings/base.py): the header timeout and coded
    answers of memproj.httpserver, the keep-alive timeout, the connection
    limit, the largest request head, and the proxies whose X-Forwarded-For is
    believed (none by default: the rate limit's source address must not be
    something a client can write)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    if host:
        # The settings judge by the bound address whether the service is served beyond this machine.
        os.environ["MEMPROJ_HOST"] = host
    import uvicorn
    from django.conf import settings

    http = settings.MEMPROJ_HTTP
    uvicorn.run(
        "memproj.asgi:application",
        host=host or settings.MEMPROJ_HOST,
        port=port or settings.MEMPROJ_PORT,
        # More than one web process pays off only beyond 2 cores (docs/benchmarks.md).
        workers=settings.MEMPROJ_WEB_WORKERS,
        http="memproj.httpserver:GuardedH11Protocol",
        ws="none",
        timeout_keep_alive=http["KEEP_ALIVE_TIMEOUT"],
        limit_concurrency=http["LIMIT_CONCURRENCY"] or None,
        h11_max_incomplete_event_size=http["MAX_HEADER_BYTES"],
        backlog=http["BACKLOG"],
        proxy_headers=bool(http["FORWARDED_ALLOW_IPS"]),
        forwarded_allow_ips=http["FORWARDED_ALLOW_IPS"] or None,
    )


def address_in_use(host: str, port: int) -> str | None:
    """Why the web process could not bind ``host:port`` (as uvicorn binds it,
    with SO_REUSEADDR), or None when it could."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    from django.conf import settings

    # Checked before any child starts: with the port taken (most often by a
    # running make run) the web process could only fail and be restarted
    # again and again, while this worker and a second beat (which sends every
    # periodic task twice) ran beside the other stack's.
    problem = address_in_use(settings.MEMPROJ_HOST, settings.MEMPROJ_PORT)
    if problem is not None:
        print(
            f"memproj: cannot serve on {settings.MEMPROJ_HOST}:{settings.MEMPROJ_PORT} ({problem}): is another "
            "make run or server using it? Stop it, or set PORT to a free port; nothing started.",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(2)
    supervisor = Supervisor(commands_for(os.geteuid()), backoff_max=read("MEMPROJ_RESTART_BACKOFF_MAX"))
    supervisor.log(f"admin at http://127.0.0.1:{settings.MEMPROJ_PORT}/admin/, MCP at /mcp/<toolset>/")
    if os.geteuid() == 0:
        supervisor.log(RUNNING_AS_ROOT)
    supervisor.run()


USAGE = """usage: python -m memproj.serve [web]

  (no argument)  make run: the web process, a Celery worker and Celery beat, restarted when they die
  web            the web process alone (uvicorn: admin, MCP, the plain HTTP API), as deployed

The port, host and the rest come from the environment (PORT, MEMPROJ_HOST, ...): docs/configuration.md."""


def cli(argv: Sequence[str]) -> int:
    """Dispatch the command line. Anything but nothing or ``web`` starts
    nothing: ``--help`` printed no help but started the whole stack (a second
    beat beside a running one sends every periodic task twice), and so did a
    typo such as ``wbe``."""
    if not argv:
        main()
        return 0
    if list(argv) == ["web"]:
        web()
        return 0
    if list(argv) in (["-h"], ["--help"], ["help"]):
        print(USAGE)
        return 0
    print(f"memproj.serve: unknown arguments {' '.join(argv)!r}; nothing started.\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
