"""Policy versions move forward in semver precedence, pre-releases included:
numeric identifiers compare as numbers (rc.9 < rc.10) and before alphanumeric
ones. The pre-release was compared as one string, so 1.0.0-rc.10 counted as
older than 1.0.0-rc.9 and could never be applied after it. A version's digits
are ASCII, as semver's are."""

from __future__ import annotations

import pytest

from policy.document import parse_version
from policy.errors import PolicyInvalid
from policy.models import PolicyVersion
from policy.services.policies import policy_apply


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("1.0.0-rc.9", "1.0.0-rc.10"),
        ("1.0.0-2", "1.0.0-10"),
        ("1.0.0-1", "1.0.0-alpha"),
        ("1.0.0-alpha", "1.0.0-alpha.1"),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
        ("1.0.0-beta.11", "1.0.0-rc.1"),
        ("1.0.0-rc.1", "1.0.0"),
    ],
)
def test_semver_precedence(older, newer):
    assert parse_version(older) < parse_version(newer)
    assert not parse_version(newer) <= parse_version(older)


def test_numbers_equal_as_numbers_are_one_version():
    assert parse_version("1.0.0-rc.1") == parse_version("1.0.0-rc.01")


@pytest.mark.parametrize("version", ["1\u0663.0.0", "1.1\uff11.0", "1.0.1\u0661"])
def test_a_version_takes_ascii_digits_only(version):
    with pytest.raises(PolicyInvalid) as info:
        parse_version(version)
    assert info.value.problems[0][0] == "version"


@pytest.mark.django_db
def test_rc_10_applies_after_rc_9(owner):
    for version in ("1.0.0-rc.9", "1.0.0-rc.10"):
        result = policy_apply(caller=owner.caller, yaml=f"version: '{version}'\nrate_limit: {{limit: 7}}\n")
        assert result.applied and result.version == version
    assert PolicyVersion.objects.get(tenant_id=owner.caller.tenant_id, is_current=True).version == "1.0.0-rc.10"
