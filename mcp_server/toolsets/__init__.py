"""The registry of served dialects: toolset name -> Dialect. A new dialect is a
module in this package with a module-level ``dialect``; add it here."""

from mcp_server.dialect import Dialect
from mcp_server.toolsets import langmem, memento, memory, pce, roampal

TOOLSETS: dict[str, Dialect] = {
    d.name: d for d in (memory.dialect, memento.dialect, langmem.dialect, pce.dialect, roampal.dialect)
}
