import io
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from policy.models import ApiToken, Principal, Tenant
from policy.services.tokens import hash_token, token_authenticate

pytestmark = pytest.mark.django_db


def test_issue_token_creates_what_is_missing_and_prints_only_the_token_last():
    out = io.StringIO()
    call_command("issue_token", "--tenant", "acme", "--principal", "ops-bot", "--role", "admin", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    caller = token_authenticate(token)
    assert caller is not None and caller.is_admin
    principal = Principal.objects.get(name="ops-bot")
    assert principal.tenant.slug == "acme" and principal.role == "admin"
    stored = ApiToken.objects.get(principal=principal)
    assert stored.token_hash == hash_token(token) and token not in (stored.token_hash, stored.prefix)

    again = io.StringIO()
    call_command("issue_token", "--tenant", "acme", "--principal", "ops-bot", "--role", "admin", stdout=again)
    second = again.getvalue().strip().splitlines()[-1]
    assert second != token and Tenant.objects.count() == 1 and Principal.objects.count() == 1
    assert ApiToken.objects.filter(principal=principal).count() == 2


def test_revoked_and_unknown_tokens_do_not_authenticate():
    out = io.StringIO()
    call_command("issue_token", "--tenant", "acme", "--principal", "p", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    from django.utils import timezone

    ApiToken.objects.update(revoked_at=timezone.now())
    assert token_authenticate(token) is None
    assert token_authenticate("mp_" + "x" * 43) is None
    assert token_authenticate("") is None


def test_bootstrap_runs_once_and_prints_no_secret(tmp_path):
    """The credentials go to a file only this OS user may read; the output,
    which a supervisor logs, names the file (issue 23)."""
    first, second = io.StringIO(), io.StringIO()
    credentials = tmp_path / "secrets" / "bootstrap.txt"
    call_command("bootstrap", "--credentials-file", str(credentials), stdout=first)
    call_command("bootstrap", "--credentials-file", str(credentials), stdout=second)
    text = credentials.read_text()
    token = next(line for line in text.splitlines() if line.startswith("API token:")).split()[-1]
    password = next(line for line in text.splitlines() if line.startswith("admin login:")).split()[4]
    assert token_authenticate(token) is not None
    assert authenticate(username="admin", password=password) is not None
    assert str(credentials) in first.getvalue()
    assert password not in first.getvalue() and token not in first.getvalue()
    assert credentials.stat().st_mode & 0o777 == 0o600 and credentials.parent.stat().st_mode & 0o777 == 0o700
    assert "already set up" in second.getvalue()
    assert Tenant.objects.count() == 1


@pytest.fixture
def empty_database():
    """A database with no tables, created by the owner role (as `make migrate` would find it)."""
    import uuid

    import psycopg
    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    owner = settings.MEMPROJ_DB_OWNER or {"USER": db["USER"], "PASSWORD": db.get("PASSWORD", "")}
    name = f"memproj_empty_{uuid.uuid4().hex[:8]}"
    params: dict[str, Any] = {"host": db["HOST"] or None, "port": db["PORT"] or None, "user": owner["USER"]}
    with psycopg.connect(dbname="postgres", autocommit=True, password=owner.get("PASSWORD") or None, **params) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield name, db
    with psycopg.connect(dbname="postgres", autocommit=True, password=owner.get("PASSWORD") or None, **params) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_a_command_on_a_never_migrated_database_says_to_migrate(empty_database):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from django.conf import settings

    name, db = empty_database
    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="memproj.settings.base",
        DATABASE_URL=f"postgres://{db['USER']}@/{name}?host={db['HOST']}",
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
    )
    proc = subprocess.run(
        [sys.executable, "manage.py", "issue_token", "--tenant", "t", "--principal", "p"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "never been migrated" in proc.stderr and "make migrate" in proc.stderr
    assert "Traceback" not in proc.stderr and "does not exist" not in proc.stderr
