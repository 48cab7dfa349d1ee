"""The long-lived processes' start-up heap, kept out of the garbage collector."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Everything loaded at start-up (Django, the MCP SDK, pydantic schemas:
    about a million objects) lives as long as the process. Frozen, a full
    collection no longer walks it: otherwise every full collection in the web
    process stops the event loop while it walks the whole start-up heap again.
    Call once, after the imports and before serving."""
    gc.collect()
    gc.freeze()
