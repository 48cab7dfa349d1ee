"""Applying tenant policies (pce-memory v0.14.0's ``pce.memory.policy.apply``): one
service for the pce tool, ``manage.py policy_apply`` and the admin.

- ``validate_only``: parse, check signature, permissions and versions; store no
  policy. A version that could not be applied now (not newer, reused, or a stale
  ``expected_version``) is reported in ``conflict``, not refused: the check is
  of the document, and it may well be prepared before the version it follows.
- ``dry_run``: the same, plus what would change (key paths and how many
  memories change visibility); store no policy.
- otherwise: the new version becomes current in one transaction, the previous
  one is kept, and a ``PolicyEvent`` records who applied it and who approved it.

Every call leaves a ``PolicyEvent``, a check or dry run too (``validated`` /
``dry_run``), and so does every refusal: a policy probed without being applied
is still someone reading what a change would reveal, or trying a payload.

Versions only move forward (semver precedence) and are never reused, so a
(tenant, version) pair names one document for ever: that is what lets
``policy.selectors.policies`` cache parsed documents by it. A policy without a
``version`` gets the current version with the patch number bumped.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from policy.caller import Caller
from policy.document import DEFAULT_POLICY, DEFAULT_POLICY_YAML, PolicyDocument, diff, parse_version, parse_yaml
from policy.errors import PolicyConflict, PolicyError, PolicyInvalid, PolicyUnauthorized
from policy.models import PolicyEvent, PolicyVersion, Tenant
from policy.ratelimit import policy_generation_bump
from policy.selectors.policies import policy_current, visibility_changes
from policy.services.signing import signature_matches, signing_key_of
from policy.tokencache import token_cache_clear

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyApplyResult:
    version: str
    previous_version: str
    applied: bool
    dry_run: bool
    validate_only: bool
    signed: bool
    source_shape: str
    changes: list[dict[str, Any]] = field(default_factory=list)
    # dry_run only: {"memories_changing_visibility": n, "memories_by_class": {...}, "changes": [...]}
    visibility: dict[str, Any] | None = None
    # validate_only / dry_run: why applying it now would be refused (a version
    # not newer than the current one, reused, or a stale expected_version).
    conflict: str | None = None


def _version_row(tenant_id: uuid.UUID, document: PolicyDocument, **fields: Any) -> PolicyVersion:
    semver = document.semver
    source = fields.pop("source_yaml")
    return PolicyVersion(
        tenant_id=tenant_id,
        version=document.version,
        major=semver.major,
        minor=semver.minor,
        patch=semver.patch,
        release_rank=semver.release_rank,
        source_yaml=source,
        source_sha256=hashlib.sha256(source.encode("utf-8")).hexdigest(),
        document=document.to_dict(),
        **fields,
    )


def policy_ensure_default(*, tenant_id: uuid.UUID) -> bool:
    """Give a tenant without a policy the default one (version 0.0.0, the values
    of pce-memory's example policy). Idempotent and race-safe: returns True if it wrote it."""
    if PolicyVersion.objects.filter(tenant_id=tenant_id, is_current=True).exists():
        return False
    try:
        with transaction.atomic():
            _version_row(
                tenant_id,
                DEFAULT_POLICY,
                source_yaml=DEFAULT_POLICY_YAML,
                is_current=True,
                applied_by_name="memproj (default policy)",
            ).save()
    except IntegrityError:
        return False  # another process wrote it first (one current per tenant)
    return True


def _require_admin(caller: Caller) -> None:
    if not (caller.is_admin and caller.has_scope("admin")):
        raise PolicyUnauthorized(
            "only a tenant admin may apply a policy: use an admin principal's token with the 'admin' scope."
        )


def _check_signature(tenant_id: uuid.UUID, yaml_text: str, signature: str | None) -> bool:
    key = signing_key_of(tenant_id)
    if key is None:
        return False
    if not signature:
        raise PolicyUnauthorized(
            "this tenant requires signed policies: send signature = hex HMAC-SHA256 of the YAML under the "
            "tenant's policy signing key."
        )
    if not signature_matches(key=key, yaml_text=yaml_text, signature=signature):
        raise PolicyUnauthorized("the policy signature does not match the YAML under this tenant's signing key.")
    return True


def _mode(*, dry_run: bool, validate_only: bool) -> str:
    return "validate_only" if validate_only else "dry_run" if dry_run else "apply"


def _source_sha256(yaml_text: str) -> str:
    return hashlib.sha256(yaml_text.encode("utf-8", "replace")).hexdigest()


def _audit_refusal(caller: Caller, exc: PolicyError, approver: str, actor_name: str, yaml_text: str, mode: str) -> None:
    # Outside the refused apply's transaction (which changed nothing): a refused
    # apply, e.g. a bad signature, is itself worth an audit trail.
    try:
        PolicyEvent.objects.create(
            tenant_id=caller.tenant_id,
            event_type="refused",
            actor_principal_id=caller.principal_id,
            actor_token_id=caller.token_id,
            actor_name=actor_name[:200],
            approver=approver[:200],
            payload={
                "code": exc.code,
                "mode": mode,
                "reason": str(exc)[:2000],
                "source_sha256": _source_sha256(yaml_text),
            },
        )
    except Exception:  # the refusal itself must still reach the caller
        logger.exception("could not audit a refused policy apply for tenant %s", caller.tenant_id)


def _version_conflict(
    tenant_id: uuid.UUID, document: PolicyDocument, current: PolicyDocument, expected: str | None
) -> str | None:
    """Why applying ``document`` over ``current`` would be refused (CONFLICT), or None."""
    if expected is not None and expected != current.version:
        return (
            f"expected_version {expected} is stale: the current policy is {current.version}. "
            "Re-read the policy, merge your change and apply again."
        )
    if document.semver <= current.semver:
        return (
            f"version {document.version} is not newer than the current policy {current.version}; "
            "bump the version (semver) to apply a change."
        )
    if PolicyVersion.objects.filter(tenant_id=tenant_id, version=document.version).exists():
        return f"version {document.version} was applied before; versions are never reused."
    return None


def policy_apply(
    *,
    caller: Caller,
    yaml: str,
    dry_run: bool = False,
    validate_only: bool = False,
    expected_version: str | None = None,
    signature: str | None = None,
    approver: str | None = None,
    actor_name: str = "",
) -> PolicyApplyResult:
    approver = (approver or "").strip()
    if len(approver) > 200:
        raise PolicyInvalid([("approver", "at most 200 characters")])
    if any(ch == "\x00" or "\ud800" <= ch <= "\udfff" for ch in approver):
        # Stored as text with the version and every event: PostgreSQL refuses a
        # NUL, UTF-8 a lone surrogate, both after the policy was checked.
        raise PolicyInvalid([("approver", "must be text without NUL characters or lone surrogates")])
    try:
        return _apply(
            caller=caller,
            yaml_text=yaml,
            dry_run=dry_run,
            validate_only=validate_only,
            expected_version=expected_version,
            signature=signature,
            approver=approver,
            actor_name=actor_name,
        )
    except PolicyError as exc:
        if Tenant.objects.filter(pk=caller.tenant_id).exists():
            mode = _mode(dry_run=dry_run, validate_only=validate_only)
            _audit_refusal(caller, exc, approver, actor_name, yaml if isinstance(yaml, str) else "", mode)
        raise


def _apply(
    *,
    caller: Caller,
    yaml_text: str,
    dry_run: bool,
    validate_only: bool,
    expected_version: str | None,
    signature: str | None,
    approver: str,
    actor_name: str,
) -> PolicyApplyResult:
    _require_admin(caller)
    document = parse_yaml(yaml_text)
    signed = _check_signature(caller.tenant_id, yaml_text, signature)
    expected = str(parse_version(expected_version, path="expected_version")) if expected_version else None
    writes = not (dry_run or validate_only)

    with transaction.atomic():
        if writes:
            # Serialise applies per tenant: the expected_version check and the
            # switch of the current row must see the same "current". NO KEY: a
            # concurrent memory insert's foreign-key check (KEY SHARE) must not
            # wait on it while it waits for that writer's tenant write lock.
            Tenant.objects.select_for_update(no_key=True).filter(pk=caller.tenant_id).first()
            policy_ensure_default(tenant_id=caller.tenant_id)
        current = policy_current(tenant_id=caller.tenant_id)
        if not document.version:
            document = document.with_version(str(current.semver.bump_patch()))
        conflict = _version_conflict(caller.tenant_id, document, current, expected)
        if conflict is not None and writes:
            raise PolicyConflict(conflict)
        # A check or a dry run validates and reports: the conflict is part of its answer.
        changes = diff(current.to_dict(), document.to_dict())
        visibility = visibility_changes(tenant_id=caller.tenant_id, before=current, after=document) if dry_run else None
        result = PolicyApplyResult(
            version=document.version,
            previous_version=current.version,
            applied=writes,
            dry_run=dry_run,
            validate_only=validate_only,
            signed=signed,
            source_shape=document.source_shape,
            changes=changes,
            visibility=visibility,
            conflict=conflict,
        )

        def record(event_type: str, **payload: Any) -> None:
            PolicyEvent.objects.create(
                tenant_id=caller.tenant_id,
                event_type=event_type,
                version=document.version,
                previous_version=current.version,
                actor_principal_id=caller.principal_id,
                actor_token_id=caller.token_id,
                actor_name=actor_name[:200],
                approver=approver,
                payload={
                    "signed": signed,
                    "source_shape": document.source_shape,
                    "changes": changes[:200],
                    **payload,
                    "elevated_from": str(caller.elevated_from) if caller.elevated_from else None,
                },
            )

        if not writes:
            # What was checked, by whom, and what it would have changed: the
            # source's hash, not the source (a probe may carry secrets).
            record(
                "validated" if validate_only else "dry_run",
                source_sha256=_source_sha256(yaml_text),
                memories_changing_visibility=(visibility or {}).get("memories_changing_visibility"),
                conflict=conflict,
            )
            return result
        # Web processes cache each token's rate limit and each tenant's policy
        # version: this one forgets them now and once the apply commits (a
        # request in between may have read the old version again), every other
        # one on its next request after the commit (policy/tokencache.py).
        token_cache_clear()
        transaction.on_commit(token_cache_clear)
        transaction.on_commit(policy_generation_bump)
        PolicyVersion.objects.filter(tenant_id=caller.tenant_id, is_current=True).update(is_current=False)
        _version_row(
            caller.tenant_id,
            document,
            source_yaml=yaml_text,
            is_current=True,
            signed=signed,
            applied_by=caller.principal_id,
            applied_by_name=actor_name[:200],
            approver=approver,
        ).save()
        record("applied")
    return result
