"""The log of refused tool calls (``RefusedCall``): pce-memory's spec records
every call in an append-only log (time, call, boundary decision, provenance).
A successful call is an audit event (``memory.api.tool_call_audit``); a refused
one changed nothing, so it goes here, never into the audit log.

``refused_call_record`` is the one writer. It keeps who was refused (tenant,
principal, token), where (toolset, tool, surface), the code and a short message,
the request id the answer named, and the names of the arguments sent, bounded;
never an argument's value (a hostile size, a secret). It never raises and never
changes the answer: a failed write is logged, at most once a minute per process,
as the other fail-open paths are. It must run outside the call's transaction
(on autocommit, after any rollback): inside one, a rolled-back write would take
the refusal's row with it. Nothing updates or deletes a row; the per-token rate
limit bounds how fast rows come (there is no retention sweep, as there is none
for the audit log)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable

from memory.models import RefusedCall, RefusedCallSurface
from policy.caller import Caller

logger = logging.getLogger(__name__)

MESSAGE_CHARS = 500
ARGUMENT_NAMES_MAX = 32
ARGUMENT_NAME_CHARS = 64
TOOL_CHARS = 100
CODE_CHARS = 64
REQUEST_ID_CHARS = 100
FAILURE_LOG_SECONDS = 60.0

_last_failure_log = [0.0]


def _text(value: object, limit: int) -> str:
    """``value`` as text PostgreSQL takes (no NUL, no lone surrogate), cut to ``limit`` characters."""
    text = str(value)[:limit]
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def refused_call_record(
    *,
    caller: Caller,
    toolset: str,
    tool: str,
    code: str,
    core_code: str = "",
    message: str = "",
    surface: str = RefusedCallSurface.MCP,
    request_id: object = None,
    argument_names: Iterable[object] = (),
) -> bool:
    """Append one refused call of ``caller`` (its own tenant, even when it
    elevated). Returns whether the row was written; never raises."""
    try:
        RefusedCall.objects.create(
            tenant_id=caller.tenant_id,
            principal_id=caller.principal_id,
            token_id=caller.token_id,
            toolset=_text(toolset, 32),
            tool=_text(tool, TOOL_CHARS),
            code=_text(code, CODE_CHARS),
            core_code=_text(core_code, CODE_CHARS),
            message=_text(message, MESSAGE_CHARS),
            surface=surface,
            request_id=_text(request_id, REQUEST_ID_CHARS) if request_id is not None else "",
            argument_names=[
                _text(name, ARGUMENT_NAME_CHARS) for name in itertools.islice(argument_names, ARGUMENT_NAMES_MAX)
            ],
        )
    except Exception:
        if time.monotonic() - _last_failure_log[0] > FAILURE_LOG_SECONDS:
            _last_failure_log[0] = time.monotonic()
            logger.warning("could not log a refused call of %s.%s; answered it as usual", toolset, tool, exc_info=True)
        return False
    return True
