"""A TCP port for a server a test starts as a child process, held from the
moment it is chosen until the server serves on it.

A port found free, released and handed to the server by number could be taken
by another process before the server binds it, and that window is the
server's whole start-up, long on a loaded machine: the server then exits
'address already in use', or the test's readiness poll reaches someone
else's server. Held, the socket is inherited by the server (``pass_fds``)
and taken over with uvicorn's ``--fd``; ``on_held_port`` does the same for
a server that starts uvicorn itself.

One difference from a server that binds by number: uvicorn wraps the socket
it is handed as AF_UNIX, so asyncio does not set TCP_NODELAY on its
connections, and a response written in several pieces can wait for the
client's delayed acknowledgement (tens of milliseconds). The tests that use
it time nothing that finely."""

from __future__ import annotations

import functools
import runpy
import socket
import sys
from collections.abc import Sequence
from types import TracebackType

# A host that names this machine only: the tests' servers are never reachable from elsewhere.
HOST = "127.0.0.1"


class HeldPort:
    """A socket bound to a free port of ``HOST``, not listening: until the
    server listens on it, a connection is refused, as to a server not yet
    started. Close it once the server has been started with ``fd`` in its
    ``pass_fds``; the server's copy keeps the port."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
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


def on_held_port(command: Sequence[str], held: HeldPort) -> list[str]:
    """``command``, ``python -m <module> ...`` of a server that starts uvicorn
    with ``uvicorn.run`` (memproj.serve's web process, ``PROCESSES["web"]``),
    serving on ``held`` instead of the address it would bind: uvicorn.run gets
    ``fd=held.fd`` and keeps every other setting the server passes it."""
    if len(command) < 3 or command[1] != "-m":
        raise ValueError(f"not a python -m command: {command!r}")
    python, _, module, *args = command
    return [python, "-m", "tests.harness.ports", str(held.fd), module, *args]


def _run_module_on_fd(fd: int, module: str, args: list[str]) -> None:
    # Should the module reach uvicorn other than through uvicorn.run, uvicorn
    # would bind the address it was given; if that is the held port (PORT for
    # memproj.serve), this process holds it, so the start fails, loudly.
    import uvicorn

    uvicorn.run = functools.partial(uvicorn.run, fd=fd)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _run_module_on_fd(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
