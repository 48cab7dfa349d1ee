"""Readers of other memory systems' stores, one module per upstream system.

Each module has ``open_source(location, **options) -> Source`` (memory.importers.base):
an opened store that yields neutral records. The import service
(memory.services.imports) writes them; nothing here touches memproj's tables."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from memory.importers.base import ImportSourceError, Source

# The name on the command line -> the module that reads that system's store.
READERS = {
    "memproj": "memproj",
    "cogx": "cogx",
    "mem0": "mem0",
    "langgraph": "langgraph",
    "mcp-memory": "mcp_memory",
    "roampal": "roampal",
    "pce": "pce",
    "butlers": "butlers",
    "memento": "memento",
}


def systems() -> list[str]:
    """The systems whose reader is present in this release."""
    present = []
    for name, module in READERS.items():
        if importlib.util.find_spec(f"memory.importers.{module}") is not None:
            present.append(name)
    return present


def open_source(system: str, location: str, **options: Any) -> Source:
    if system not in READERS:
        raise ImportSourceError(f"unknown system {system!r}; one of: {', '.join(systems())}.")
    module = importlib.import_module(f"memory.importers.{READERS[system]}")
    source: Source = module.open_source(location, **options)
    return source
