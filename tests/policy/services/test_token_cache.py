"""The HTTP tier's token cache: a revocation through the service takes effect
at once in this process, expired tokens are never served from the cache, and
a cached caller never carries one request's policy into the next."""

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from policy import tokencache
from policy.models import ApiToken
from policy.services import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_cache():
    tokens.token_cache_clear()
    yield
    tokens.token_cache_clear()


def test_revoking_clears_the_cache_at_once():
    issued = tokens.token_issue(tenant_slug="acme", principal_name="bot")
    assert tokens.token_authenticate_cached(issued.token) is not None
    assert tokens.token_cached_caller(issued.token) is not None
    assert tokens.token_revoke(ApiToken.objects.filter(pk=issued.api_token.pk)) == 1
    assert tokens.token_cached_caller(issued.token) is None
    assert tokens.token_authenticate_cached(issued.token) is None


def test_unknown_tokens_are_not_cached():
    assert tokens.token_authenticate_cached("mp_" + "x" * 43) is None
    assert tokens.token_cached_caller("mp_" + "x" * 43) is None


def test_an_expired_token_is_not_served_from_the_cache(monkeypatch):
    issued = tokens.token_issue(tenant_slug="acme", principal_name="bot")
    ApiToken.objects.filter(pk=issued.api_token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert tokens.token_authenticate_cached(issued.token) is None
    # A token with a minute left is cached for that minute, not for the cache's
    # window (made an hour here, so only the token's expiry can end the entry).
    monkeypatch.setattr(tokencache, "TOKEN_CACHE_SECONDS", 3600.0)
    monkeypatch.setattr(tokens, "TOKEN_CACHE_SECONDS", 3600.0)
    ApiToken.objects.filter(pk=issued.api_token.pk).update(expires_at=timezone.now() + timedelta(seconds=60))
    assert tokens.token_authenticate_cached(issued.token) is not None
    assert tokens.token_cached_caller(issued.token) is not None
    expired = time.monotonic() + 61
    monkeypatch.setattr(tokencache, "time", SimpleNamespace(monotonic=lambda: expired))
    assert tokens.token_cached_caller(issued.token) is None


def test_each_hit_is_a_fresh_caller_without_a_resolved_policy():
    issued = tokens.token_issue(tenant_slug="acme", principal_name="bot")
    first = tokens.token_authenticate_cached(issued.token)
    assert first is not None
    first.policy  # noqa: B018 - resolves and fixes the policy on this caller only
    second = tokens.token_cached_caller(issued.token)
    assert second is not None and second is not first and "policy" not in second.__dict__
    assert (second.tenant_id, second.principal_id, second.scopes) == (first.tenant_id, first.principal_id, first.scopes)


def test_a_lookup_that_read_the_token_before_a_revocation_does_not_cache_it_after(monkeypatch):
    """A request's lookup read the token's row just before a revocation
    committed elsewhere; while it ran, the next request saw the new generation
    and cleared the cache. The slow lookup must not put the revoked token back,
    or requests after the revocation would be served from the cache."""
    issued = tokens.token_issue(tenant_slug="acme", principal_name="bot")
    read_before = tokens._authenticate

    def slow_lookup(token: str):
        found = read_before(token)
        # Meanwhile: the revocation commits, and another request's generation check clears the cache.
        ApiToken.objects.filter(pk=issued.api_token.pk).update(revoked_at=timezone.now())
        tokencache.token_cache_clear()
        return found

    monkeypatch.setattr(tokens, "_authenticate", slow_lookup)
    assert tokens.token_authenticate_cached(issued.token) is not None  # it was valid when read
    monkeypatch.setattr(tokens, "_authenticate", read_before)
    assert tokens.token_cached_caller(issued.token) is None
    assert tokens.token_authenticate_cached(issued.token) is None
