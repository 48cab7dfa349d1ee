"""The benchmarks' PostgreSQL CPU per call counts a backend whose connection
closed during the step (the web tier closes each at DB_CONN_MAX_AGE)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections

from tests.harness.load.cpu import _CLK_TCK, _proc_stat
from tests.harness.load.percall import BackendWatch

pytestmark = pytest.mark.django_db(transaction=True)


def _burn_on_a_connection_then_close(spent: list[float]) -> None:
    """In a thread of its own (its own connection, a backend of its own): burn
    CPU in that backend, let the watch see it, then close the connection."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM generate_series(1, 3000000)")
            stat = _proc_stat(pid)
            assert stat is not None
            spent.append((int(stat[1][11]) + int(stat[1][12])) / _CLK_TCK)
        time.sleep(0.6)
    finally:
        connection.close()


def test_a_backend_that_ends_mid_step_still_counts() -> None:
    database = connections["default"].settings_dict["NAME"]
    spent: list[float] = []
    with BackendWatch(database, interval=0.1) as watch:
        burner = threading.Thread(target=_burn_on_a_connection_then_close, args=(spent,))
        burner.start()
        burner.join()
        time.sleep(0.3)  # the backend has exited before the step's end
    assert spent and spent[0] > 0.05, "the statement should burn measurable CPU"
    # Read only at the start and the end, this backend (gone by the end) would count 0.
    assert watch.spent() >= 0.9 * spent[0]
