"""TCP ports for the servers the tests and benchmarks start as child
processes, and waiting for those servers to serve.

A port found free, released and handed to the server by number could be taken
by another process before the server binds it, and that window is the
server's whole start-up, long on a loaded machine: the server then exits
'address already in use', or the readiness poll reaches someone else's
server. So a server that can be handed a socket gets a :class:`HeldPort`,
bound from the moment it is chosen: the socket is inherited by the server
(``pass_fds``) and taken over with uvicorn's ``--fd`` (``on_held_port`` does
the same for a server that starts uvicorn itself; haproxy binds ``fd@<n>``),
and :func:`serve_until_ready` starts it and waits until it answers.

A server that can only be given a number (PostgreSQL, Redis, memproj.serve,
whose supervisor starts the web process anew after a crash) gets a
:func:`free_port` and is started with :func:`retry_if_address_in_use`: its
start function waits with :func:`wait_until_serving`, which counts the server
as ready only once the server itself listens on the port (not whoever took
it), and raises :class:`AddressInUse` when the server says the port was
taken, to be started again on another port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

# A host that names this machine only: the tests' servers are never reachable from elsewhere.
HOST = "127.0.0.1"
# How many ports a server given its port by number is tried on: another
# process taking the one port in the short window is plausible, taking
# several in a row means something else is wrong, which should be reported.
START_ATTEMPTS = 5
# How uvicorn (asyncio), PostgreSQL, Redis and haproxy all say that a port was taken (lower-cased).
ADDRESS_IN_USE = "address already in use"
# Enough of a server's output to show why it did not start (a traceback, a FATAL line).
TAIL_LINES = 60

T = TypeVar("T")


class ServerDidNotStart(RuntimeError):
    """A server exited or did not answer in time; the message ends with the end of its output."""


class AddressInUse(ServerDidNotStart):
    """A server given its port by number found the port taken."""


class ServerDidNotStop(RuntimeError):
    """A server outlived SIGTERM by its whole grace period and was killed."""


class HeldPort:
    """A socket bound to a free port of ``HOST``, not listening: until the
    server listens on it, a connection is refused, as to a server not yet
    started. Close it once the server has been started with ``fd`` in its
    ``pass_fds``; the server's copy keeps the port."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # uvicorn wraps a socket it is handed as AF_UNIX, so asyncio does not set
        # TCP_NODELAY on the connections it accepts, as it does when it binds the
        # address itself; a response written in several pieces would then wait for
        # the client's delayed acknowledgement. An accepted connection inherits
        # the option from the listening socket (Linux), so it is set here.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind((HOST, 0))
        self.port: int = self._socket.getsockname()[1]
        self.fd = self._socket.fileno()

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> HeldPort:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# Run as ``python -c`` rather than as a module of this checkout: the server may
# be started in another copy of the code (a benchmark's baseline), whose
# directory is where ``python -m`` looks first and which need not hold this
# file. Should the module reach uvicorn other than through uvicorn.run, uvicorn
# would bind the address it was given; if that is the held port (PORT for
# memproj.serve), this process holds it, so the start fails, loudly.
_SERVE_ON_FD = """\
import functools, runpy, sys
import uvicorn
fd, module, *args = sys.argv[1:]
uvicorn.run = functools.partial(uvicorn.run, fd=int(fd))
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def on_held_port(command: Sequence[str], held: HeldPort) -> list[str]:
    """``command``, ``python -m <module> ...`` of a server that starts uvicorn
    with ``uvicorn.run`` (memproj.serve's web process, ``PROCESSES["web"]``),
    serving on ``held`` instead of the address it would bind: uvicorn.run gets
    ``fd=held.fd`` and keeps every other setting the server passes it."""
    if len(command) < 3 or command[1] != "-m":
        raise ValueError(f"not a python -m command: {command!r}")
    python, _, module, *args = command
    return [python, "-c", _SERVE_ON_FD, str(held.fd), module, *args]


def free_port() -> int:
    """A port free a moment ago, released: for a server that can only be given a
    number. Another process can take it before the server binds it, so start
    that server with :func:`retry_if_address_in_use`."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def output_since(log_path: Path, since: int = 0) -> str:
    """What a server wrote to ``log_path`` after its first ``since`` bytes."""
    try:
        with open(log_path, "rb") as log:
            log.seek(since)
            return log.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def output_tail(log_path: Path, since: int = 0, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of :func:`output_since`."""
    return "\n".join(output_since(log_path, since).splitlines()[-lines:])


def log_size(log_path: Path) -> int:
    """Where a server's output will start in ``log_path`` (appended to)."""
    try:
        return log_path.stat().st_size
    except FileNotFoundError:
        return 0


def serve_until_ready(
    command: Sequence[str],
    held: HeldPort,
    *,
    log_path: Path,
    name: str,
    timeout: float = 120,
    probe: str | None = "/healthz",
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command``, a server handed ``held`` (its fd is passed on), and
    return it once it answers: ``probe`` with a 200 over HTTP, or, with no
    probe, a TCP connection. Its output is appended to ``log_path``: a pipe
    nobody reads would stop a server that logs once the pipe was full. If it
    exits or has not answered within ``timeout`` seconds, it is stopped and
    :class:`ServerDidNotStart` tells why, with the end of its output. The
    caller closes ``held`` (the server's copy keeps the port)."""
    since = log_size(log_path)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(command),
            env=None if env is None else dict(env),
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(held.fd,),
        )
    try:
        _wait(proc, held.port, lambda: _answers(held.port, probe), log_path, since, name, timeout)
    except BaseException:
        # The reason it did not start is the error to report, not how it stopped.
        with contextlib.suppress(ServerDidNotStop):
            stop_server(proc, log_path=log_path, name=name, since=since)
        raise
    return proc


def wait_until_serving(
    proc: subprocess.Popen[bytes],
    port: int,
    *,
    log_path: Path,
    name: str,
    since: int = 0,
    timeout: float = 120,
    probe: str | None = None,
) -> None:
    """Until ``proc``, a server given ``port`` by number, serves on it: the
    port is listened on by ``proc`` or one of its descendants (someone else's
    server on the port does not count) and, with ``probe``, answers it with a
    200 over HTTP. :class:`AddressInUse` as soon as its output past byte
    ``since`` of ``log_path`` says the address is in use, otherwise
    :class:`ServerDidNotStart` if it exits or ``timeout`` seconds pass. The
    server is left running either way: the caller stops it (a supervisor is
    stopped with its children, not killed)."""
    _wait(
        proc,
        port,
        lambda: listens_on(proc.pid, port) and _answers(port, probe),
        log_path,
        since,
        name,
        timeout,
        port_taken_is_reported=True,
    )


def retry_if_address_in_use(start: Callable[[int], T], *, port: int | None = None, attempts: int = START_ATTEMPTS) -> T:
    """``start(port)``, on ``port`` if given, else on a :func:`free_port`; while
    it raises :class:`AddressInUse` (having stopped what it started), again on
    another free port, ``attempts`` times in all."""
    taken: list[int] = []
    for _ in range(attempts):
        chosen = port if port is not None and not taken else free_port()
        try:
            return start(chosen)
        except AddressInUse as exc:
            taken.append(chosen)
            last = exc
    raise ServerDidNotStart(f"every port tried was taken ({', '.join(map(str, taken))}); the last:\n{last}") from last


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` or one of its descendants listens on TCP ``port``."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for process in processes:
        with contextlib.suppress(psutil.Error):
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                    return True
    return False


def stop_server(
    proc: subprocess.Popen[bytes], *, log_path: Path, name: str, timeout: float = 20, since: int = 0
) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not exited within ``timeout``
    seconds; a server that had to be killed is reported (with the end of its
    output) once it is gone."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise ServerDidNotStop(
            _failure(f"{name} did not stop within {timeout:g} s of SIGTERM", log_path, since)
        ) from None


def _wait(
    proc: subprocess.Popen[bytes],
    port: int,
    ready: Callable[[], bool],
    log_path: Path,
    since: int,
    name: str,
    timeout: float,
    *,
    port_taken_is_reported: bool = False,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        # Whether it exited is looked at first: what it wrote before exiting is then in the log.
        exited = proc.poll() is not None
        if port_taken_is_reported and ADDRESS_IN_USE in output_since(log_path, since).lower():
            raise AddressInUse(_failure(f"{name} found port {port} taken", log_path, since))
        if exited:
            raise ServerDidNotStart(
                _failure(f"{name} exited with code {proc.returncode} before serving on port {port}", log_path, since)
            )
        if ready():
            return
        if time.monotonic() > deadline:
            raise ServerDidNotStart(
                _failure(f"{name} did not serve on port {port} within {timeout:g} s", log_path, since)
            )
        time.sleep(0.2)


def _answers(port: int, probe: str | None) -> bool:
    if probe is None:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
        except OSError:
            return False
        return True
    import httpx

    try:
        return httpx.get(f"http://{HOST}:{port}{probe}", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _failure(what: str, log_path: Path, since: int) -> str:
    tail = output_tail(log_path, since)
    return f"{what}; the end of its output ({log_path}):\n{tail or '(nothing)'}"
