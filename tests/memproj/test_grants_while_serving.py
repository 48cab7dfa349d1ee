"""`manage.py migrate` re-grants the service's role its privileges after every
run (``memproj.dbroles.grant_app_privileges``, post_migrate), also when web
processes are serving: an upgrade migrates a live database. A store seals its
audit event in its own transaction (``UPDATE memory_memoryevent SET mac``), so
a moment in which that privilege is missing fails a user's write."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections

from memproj.dbroles import grant_app_privileges, separate_roles

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 40


def _connect(credentials: dict[str, Any]) -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        dbname=db["NAME"],
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=credentials["USER"],
        password=credentials.get("PASSWORD") or None,
        autocommit=True,
    )


def _grant_as_owner(rounds: int, errors: list[BaseException]) -> None:
    """``grant_app_privileges`` as post_migrate runs it, on this thread's own
    connection of the default alias, connected as the owner (migrate's role)."""
    wrapper = connections["default"]
    wrapper.settings_dict = {**wrapper.settings_dict, **settings.MEMPROJ_DB_OWNER}
    try:
        for _ in range(rounds):
            grant_app_privileges(using="default")
    except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
        errors.append(exc)
    finally:
        wrapper.close()


@pytest.fixture
def owner_role() -> None:
    if not separate_roles():
        pytest.skip("no separate owner role configured")


def test_the_service_role_keeps_sealing_events_while_migrate_re_grants(owner_role):
    """The service's role may update an event's MAC at every moment of a
    re-grant: before, the grants ran one statement at a time, and between the
    revoke of UPDATE on the audit log and the grant of UPDATE (mac) every store
    failed with "permission denied for table memory_memoryevent"."""
    app = _connect({"USER": connection.settings_dict["USER"], "PASSWORD": connection.settings_dict.get("PASSWORD")})
    errors: list[BaseException] = []
    regrants = threading.Thread(target=_grant_as_owner, args=(ROUNDS, errors))
    denied = sealed = 0
    regrants.start()
    try:
        while regrants.is_alive():
            try:
                app.execute("UPDATE memory_memoryevent SET mac = mac WHERE id = -1")
                sealed += 1
            except psycopg.errors.InsufficientPrivilege:
                denied += 1
    finally:
        regrants.join()
        app.close()
    assert not errors, errors
    assert sealed > ROUNDS, "the writer never ran during the re-grants"
    assert denied == 0, f"{denied} of {denied + sealed} seals were refused while migrate re-granted"


def test_two_migrates_at_once_both_finish(owner_role):
    """Two `manage.py migrate` at once (two hosts of a deployment starting
    together) re-grant side by side: each waits for the other instead of one
    failing on a catalog row the other is updating ("tuple concurrently updated")."""
    errors: list[BaseException] = []
    both = [threading.Thread(target=_grant_as_owner, args=(ROUNDS // 2, errors)) for _ in range(2)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    assert not errors, errors
