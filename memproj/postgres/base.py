"""Django's PostgreSQL backend with a connection health check that sends nothing.

With ``CONN_HEALTH_CHECKS`` Django checks a kept connection before the first
statement of every request (for memproj every tool call, and every thread of
a call that reads side by side) by sending ``SELECT 1``: a round trip and a
statement for PostgreSQL, per connection per call. A connection the server
has ended - a restart, ``pg_terminate_backend``, an idle-session timeout -
says so on its socket: the server's last message and the end of the stream
make it readable. An idle connection otherwise has nothing to read, so a
socket with nothing waiting is taken as usable without a statement, and only
one with something waiting (its end, or a rare notice) is checked as Django
checks it. A connection that died without a word (a network partition) is
found by neither check before the statement that uses it fails."""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        pgconn = connection.pgconn
        if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status not in (
            pq.TransactionStatus.IDLE,
            pq.TransactionStatus.INTRANS,
        ):
            return False
        try:
            waiting = select.poll()
            waiting.register(pgconn.socket, select.POLLIN | select.POLLPRI)
            if not waiting.poll(0):
                return True
        except (OSError, ValueError):  # no socket, or one the poll cannot take
            return False
        return bool(super().is_usable())
