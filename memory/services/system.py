"""What background work runs as and is tuned by: the system caller (no human
actor) and the pipeline settings. Used by the sweeps, the conflict check and
consolidation."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

from policy.caller import Caller


def pipeline_setting(name: str) -> Any:
    return settings.MEMPROJ_PIPELINE[name]


def system_caller(tenant_id: uuid.UUID) -> Caller:
    """The caller background work acts as: inside one tenant, no principal (so
    audit events show no human actor), allowed to write."""
    return Caller(tenant_id=tenant_id, principal_id=None, role="admin", scopes=frozenset({"read", "write"}))
