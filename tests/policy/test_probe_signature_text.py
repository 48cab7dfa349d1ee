"""A signature that is not ASCII text (``é`` x 64, a lone surrogate) is a
signature that does not match: UNAUTHORIZED, audited like any bad signature.
hmac.compare_digest raised TypeError on it, an INTERNAL error from the apply."""

from __future__ import annotations

import pytest

from policy.errors import PolicyUnauthorized
from policy.models import PolicyEvent
from policy.services.policies import policy_apply
from policy.services.signing import signing_key_set

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("signature", ["\u00e9" * 64, "sha256=\u0661" * 8, "\udcff" * 64])
@pytest.mark.parametrize("mode", ["validate_only", "apply"])
def test_a_signature_that_is_not_ascii_does_not_match(owner, signature, mode):
    signing_key_set(caller=owner.caller)
    with pytest.raises(PolicyUnauthorized) as info:
        policy_apply(
            caller=owner.caller,
            yaml="version: '2.0.0'\nrate_limit: {limit: 9}\n",
            validate_only=mode == "validate_only",
            signature=signature,
        )
    assert info.value.code == "UNAUTHORIZED" and "does not match" in str(info.value)
    refused = PolicyEvent.objects.get(tenant_id=owner.caller.tenant_id, event_type="refused")
    assert refused.payload["code"] == "UNAUTHORIZED"
