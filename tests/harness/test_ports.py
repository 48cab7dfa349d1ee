"""tests.harness.ports: a held port cannot be taken by another process
before the server it is meant for serves on it."""

from __future__ import annotations

import errno
import socket

import pytest

from tests.harness.ports import HOST, HeldPort, on_held_port


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


def test_only_a_python_m_command_can_be_started_on_a_held_port():
    with HeldPort() as held:
        command = on_held_port(["python", "-m", "memproj.serve", "web"], held)
        assert command == ["python", "-m", "tests.harness.ports", str(held.fd), "memproj.serve", "web"]
        with pytest.raises(ValueError, match="not a python -m command"):
            on_held_port(["uvicorn", "memproj.asgi:application"], held)
