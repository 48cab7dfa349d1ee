"""Deterministic interleavings for race tests: a write committed by another
thread, on its own database connection, at the moment the test chooses (inside
the window between a read and the act on it)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection

# Seconds: only a broken test waits this long.
WAIT = 60


def committed_in_another_thread(work: Callable[[], object]) -> None:
    """Run ``work`` in another thread (so on another connection, committing as
    it goes) and wait for it; its error, if any, fails the test here."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()  # the thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive() and errors == [], errors
