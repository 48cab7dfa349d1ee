"""One package per dialect, each the home of everything that speaks one
upstream's language:

- ``tools.py``: the ``Dialect`` (its name, instructions and error vocabulary)
  and its MCP tools, in the upstream's words;
- ``texts.py`` (roampal) or ``schemas.py`` (pce): the upstream's longer texts
  or JSON Schemas, verbatim;
- ``routes.py`` (roampal, langmem): the dialect's own plain HTTP routes;
- ``client.py`` (langmem): a Python client of those routes.

A dialect module imports, of memproj's own code, only ``mcp_server.dialect``
(the seam: tools, and the HTTP plumbing its routes share with the site's),
``memory.api`` and its own package. The registry of served dialects is
``mcp_server.registry``. Nothing is imported
here: ``mcp_server.dialects.langmem.client`` must import without Django."""
