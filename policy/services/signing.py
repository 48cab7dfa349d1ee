"""Policy signatures (pce-memory v0.14.0, fail-closed): with a tenant signing key set,
``signature`` must be the lowercase hex HMAC-SHA256 of the policy YAML's UTF-8
bytes under that key, optionally written ``sha256=<hex>`` (the GitHub webhook
form). HMAC, not a public-key signature: the key is a shared secret between
the tenant's GitOps pipeline and memproj, stored in ``PolicySigningKey``.

Sign in a pipeline with:
    printf %s "$(cat policy.yaml)" | openssl dgst -sha256 -hmac "$KEY" -hex
or ``python -c "from policy.services.signing import policy_sign; ..."``; the
bytes signed are exactly the ``yaml`` string sent (no newline added or stripped).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid

from django.db import transaction

from policy.caller import Caller
from policy.errors import PolicyUnauthorized
from policy.models import PolicyEvent, PolicySigningKey


def policy_sign(*, key: str, yaml_text: str) -> str:
    return hmac.new(key.encode("utf-8"), yaml_text.encode("utf-8"), hashlib.sha256).hexdigest()


def signature_matches(*, key: str, yaml_text: str, signature: str) -> bool:
    given = signature.strip().lower().removeprefix("sha256=")
    if not given.isascii():
        # compare_digest raises TypeError on text that is not ASCII; such a
        # signature is no hex digest, so it simply does not match.
        return False
    return hmac.compare_digest(given, policy_sign(key=key, yaml_text=yaml_text))


def signing_key_of(tenant_id: uuid.UUID) -> str | None:
    return PolicySigningKey.objects.filter(tenant_id=tenant_id).values_list("secret", flat=True).first()


def _require_admin(caller: Caller) -> None:
    if not (caller.is_admin and caller.has_scope("admin")):
        raise PolicyUnauthorized("only a tenant admin may change policy signing keys.")


def signing_key_set(*, caller: Caller, secret: str | None = None, actor_name: str = "") -> str:
    """Set (or rotate) the tenant's key; returns it — show it once, it is not shown again."""
    _require_admin(caller)
    secret = secret or secrets.token_hex(32)
    if len(secret) < 32:
        raise PolicyUnauthorized("a signing key needs at least 32 characters.")
    with transaction.atomic():
        PolicySigningKey.objects.update_or_create(tenant_id=caller.tenant_id, defaults={"secret": secret})
        PolicyEvent.objects.create(
            tenant_id=caller.tenant_id,
            event_type="signing_key_set",
            actor_principal_id=caller.principal_id,
            actor_token_id=caller.token_id,
            actor_name=actor_name,
        )
    return secret


def signing_key_clear(*, caller: Caller, actor_name: str = "") -> bool:
    _require_admin(caller)
    with transaction.atomic():
        deleted = PolicySigningKey.objects.filter(tenant_id=caller.tenant_id).delete()[0] > 0
        if deleted:
            PolicyEvent.objects.create(
                tenant_id=caller.tenant_id,
                event_type="signing_key_cleared",
                actor_principal_id=caller.principal_id,
                actor_token_id=caller.token_id,
                actor_name=actor_name,
            )
    return deleted
