"""Fixtures shared by the memory app's tests."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from memproj.dbroles import separate_roles


@pytest.fixture
def owner_connection() -> Iterator[psycopg.Connection]:
    """A second connection as the schema owner (what migrations use), which may
    switch the audit log's append-only guard off."""
    if not separate_roles():
        pytest.skip("no separate owner role configured")
    db = connection.settings_dict
    conn = psycopg.connect(
        dbname=db["NAME"],
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=settings.MEMPROJ_DB_OWNER["USER"],
        password=settings.MEMPROJ_DB_OWNER.get("PASSWORD") or None,
        autocommit=True,
    )
    yield conn
    conn.close()
