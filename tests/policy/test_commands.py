import io

import pytest
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


def test_bootstrap_runs_once():
    first, second = io.StringIO(), io.StringIO()
    call_command("bootstrap", stdout=first)
    call_command("bootstrap", stdout=second)
    token_line = next(line for line in first.getvalue().splitlines() if "API token" in line)
    assert token_authenticate(token_line.split()[-1]) is not None
    assert "already set up" in second.getvalue()
    assert Tenant.objects.count() == 1
