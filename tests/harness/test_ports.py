"""tests.harness.ports: a held port cannot be taken by another process
before the server it is meant for serves on it; a server that can only be
given a number is started again elsewhere when its port was taken; and a
server that does not start is reported with the end of its output."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.harness.ports import (
    HOST,
    AddressInUse,
    HeldPort,
    ServerDidNotStart,
    log_size,
    on_held_port,
    retry_if_address_in_use,
    serve_until_ready,
    stop_server,
    wait_until_serving,
)

# A server on a port given by number, as PostgreSQL or Redis is: it binds the
# number itself and exits with Python's "Address already in use" if it is taken.
NUMBER_SERVER = textwrap.dedent(
    """
    import http.server, sys

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
    """
)

# A server that starts uvicorn with uvicorn.run on an address of its own, as memproj.serve's web process does.
UVICORN_MODULE = textwrap.dedent(
    """
    import sys
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    if __name__ == "__main__":
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started, stopped afterwards whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def test_a_held_port_cannot_be_bound_by_anyone_else_and_refuses_connections_until_served():
    with HeldPort() as held:
        # SO_REUSEADDR as uvicorn and asyncio set it: it still does not share a bound port.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError) as refused:
                other.bind((HOST, held.port))
        assert refused.value.errno == errno.EADDRINUSE
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((HOST, held.port), timeout=5).close()


def test_connections_accepted_on_a_held_port_have_tcp_nodelay_as_on_an_address_uvicorn_binds():
    with HeldPort() as held:
        # As uvicorn takes over --fd: wrapped as AF_UNIX, so asyncio leaves TCP_NODELAY alone.
        listener = socket.fromfd(held.fd, socket.AF_UNIX, socket.SOCK_STREAM)
        with listener:
            listener.listen()
            with socket.create_connection((HOST, held.port), timeout=5):
                accepted, _ = listener.accept()
                with accepted:
                    assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


def test_only_a_python_m_command_can_be_started_on_a_held_port():
    with HeldPort() as held:
        command = on_held_port(["python", "-m", "memproj.serve", "web"], held)
        assert command[:2] == ["python", "-c"]
        assert command[3:] == [str(held.fd), "memproj.serve", "web"]
        with pytest.raises(ValueError, match="not a python -m command"):
            on_held_port(["uvicorn", "memproj.asgi:application"], held)


def test_a_server_that_calls_uvicorn_run_serves_on_the_held_port_from_another_directory(tmp_path, started):
    # Another directory, as a benchmark's baseline copy of the code: no tests.harness there.
    (tmp_path / "fake_serve.py").write_text(UVICORN_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with HeldPort() as held:
        # The address it asks for is the held port itself: binding it would fail.
        command = on_held_port([sys.executable, "-m", "fake_serve", str(held.port)], held)
        proc = serve_until_ready(
            command, held, log_path=tmp_path / "serve.log", name="fake_serve", timeout=60, env=env, cwd=tmp_path
        )
        started.append(proc)
    assert httpx.get(f"http://{HOST}:{held.port}/healthz", timeout=10).text == "ok"
    stop_server(proc, log_path=tmp_path / "serve.log", name="fake_serve")
    assert proc.returncode is not None


def test_a_server_that_exits_early_is_reported_with_its_own_output(tmp_path, started):
    log_path = tmp_path / "server.log"
    log_path.write_text("output of an earlier start\n")
    crash = (
        "import sys; print('loading settings', flush=True); sys.stderr.write('no database at /nowhere\\n'); sys.exit(3)"
    )
    started_at = time.monotonic()
    with HeldPort() as held, pytest.raises(ServerDidNotStart) as failed:
        serve_until_ready(_python(crash), held, log_path=log_path, name="the crasher", timeout=60)
    message = str(failed.value)
    assert "the crasher exited with code 3" in message
    assert "loading settings" in message and "no database at /nowhere" in message
    assert "earlier start" not in message
    # Reported as soon as it exited, not when the wait ran out.
    assert time.monotonic() - started_at < 30


def test_a_server_that_never_answers_is_stopped_and_reported_after_the_wait(tmp_path):
    log_path = tmp_path / "server.log"
    hang = "import os, time; print('pid', os.getpid(), 'still loading', flush=True); time.sleep(600)"
    started_at = time.monotonic()
    with HeldPort() as held, pytest.raises(ServerDidNotStart) as failed:
        serve_until_ready(_python(hang), held, log_path=log_path, name="the sleeper", timeout=1)
    message = str(failed.value)
    assert f"the sleeper did not serve on port {held.port} within 1 s" in message
    assert "still loading" in message
    assert time.monotonic() - started_at < 30
    pid = int(re.search(r"pid (\d+) still loading", message).group(1))  # type: ignore[union-attr]
    assert not psutil.pid_exists(pid)


def _number_server(tmp_path: Path, started: list[subprocess.Popen[bytes]], tried: list[int]):
    def start(port: int) -> subprocess.Popen[bytes]:
        tried.append(port)
        log_path = tmp_path / "number.log"
        since = log_size(log_path)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(_python(NUMBER_SERVER, str(port)), stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        try:
            wait_until_serving(proc, port, log_path=log_path, name="the server", since=since, timeout=60)
        except ServerDidNotStart:
            proc.kill()
            proc.wait()
            raise
        return proc

    return start


def test_a_server_given_a_taken_port_by_number_is_started_again_on_another(tmp_path, started):
    tried: list[int] = []
    start = _number_server(tmp_path, started, tried)
    with HeldPort() as taken:
        with pytest.raises(AddressInUse, match=f"the server found port {taken.port} taken"):
            start(taken.port)
        proc = retry_if_address_in_use(start, port=taken.port)
    assert len(tried) == 3 and tried[1] == taken.port and tried[2] != taken.port
    assert proc.poll() is None
    assert httpx.get(f"http://{HOST}:{tried[2]}/healthz", timeout=10).status_code == 200


def test_a_port_taken_every_time_is_given_up_after_the_attempts_and_other_failures_are_not_retried():
    calls: list[int] = []

    def taken(port: int) -> None:
        calls.append(port)
        raise AddressInUse(f"port {port} taken")

    with pytest.raises(ServerDidNotStart, match="every port tried was taken") as failed:
        retry_if_address_in_use(taken, port=1, attempts=3)
    assert not isinstance(failed.value, AddressInUse)
    assert len(calls) == 3 and calls[0] == 1 and 1 not in calls[1:]

    calls.clear()

    def broken(port: int) -> None:
        calls.append(port)
        raise ServerDidNotStart("it crashed")

    with pytest.raises(ServerDidNotStart, match="it crashed"):
        retry_if_address_in_use(broken, attempts=3)
    assert len(calls) == 1


def test_a_server_given_a_number_is_ready_only_when_it_listens_itself(tmp_path, started):
    log_path = tmp_path / "server.log"
    # What an earlier start said is not this start's failure.
    log_path.write_text("ERROR: [Errno 98] error while attempting to bind on address: address already in use\n")
    since = log_size(log_path)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(_python("import time; time.sleep(600)"), stdout=log, stderr=subprocess.STDOUT)
    started.append(proc)
    # Someone else's server on the port: it accepts connections, but it is not ours.
    with socket.socket() as other:
        other.bind((HOST, 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(ServerDidNotStart, match=f"did not serve on port {port} within 1 s") as failed:
            wait_until_serving(proc, port, log_path=log_path, name="ours", since=since, timeout=1)
    assert not isinstance(failed.value, AddressInUse)


def test_a_server_that_says_its_port_is_taken_without_exiting_is_reported_at_once(tmp_path, started):
    # memproj.serve's supervisor outlives its web process's failure to bind, and starts it again.
    log_path = tmp_path / "server.log"
    says_taken = (
        "import time; print('ERROR: [Errno 98] error while attempting to bind on address: "
        "Address already in use', flush=True); time.sleep(600)"
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(_python(says_taken), stdout=log, stderr=subprocess.STDOUT)
    started.append(proc)
    started_at = time.monotonic()
    with pytest.raises(AddressInUse, match="Errno 98"):
        wait_until_serving(proc, 1, log_path=log_path, name="the supervisor", timeout=60)
    assert time.monotonic() - started_at < 30
    assert proc.poll() is None  # left for the caller to stop
