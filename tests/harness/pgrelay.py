"""The test database behind a Unix-socket relay a test cuts (a stopped
server: connections refused and dropped) or stalls (a frozen server or a
partitioned network: connections kept, nothing answered)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from django.db import connection


class PostgresRelay:
    """A Unix socket that forwards to the test database's socket until cut."""

    def __init__(self, directory: Path) -> None:
        db = connection.settings_dict
        port = db["PORT"] or "5432"
        self.upstream = os.path.join(db["HOST"], f".s.PGSQL.{port}")
        self.directory = directory
        self.path = str(directory / f".s.PGSQL.{port}")
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.flowing = threading.Event()
        self.flowing.set()
        self.up()

    def up(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and drop every open one, as a stopped server does."""
        assert self.listener is not None
        self.listener.close()
        self.listener = None
        os.unlink(self.path)
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.open.clear()

    def stall(self) -> None:
        """Keep every connection open but pass nothing on, as a frozen server or a
        partitioned network does: a query waits for an answer that never comes."""
        self.flowing.clear()

    def flow(self) -> None:
        self.flowing.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.upstream)
            with self.lock:
                self.open.extend((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def postgres_relay() -> Iterator[PostgresRelay]:
    """A relay in a directory of its own (a Unix socket's path is at most 107
    bytes, hence /tmp), left flowing and removed afterwards."""
    directory = Path(os.path.join("/tmp", f"pgrelay-{os.getpid()}-{time.monotonic_ns()}"))
    directory.mkdir()
    relay = PostgresRelay(directory)
    try:
        yield relay
    finally:
        relay.flow()
        if relay.listener is not None:
            relay.down()
        directory.rmdir()
