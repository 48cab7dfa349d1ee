"""The `roampal` dialect: roampal v0.3.5's outcome-scored memory in
collections.

- ``tools.py``: the dialect and its MCP tools;
- ``texts.py``: roampal's texts, verbatim (tool descriptions, the KNOWN
  CONTEXT block, the scoring prompts, the result lines);
- ``routes.py``: the hook server (``/api/hooks/get-context``,
  ``/api/hooks/stop``) and ``/api/search``, ``/api/ingest``."""
