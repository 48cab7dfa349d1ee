"""The `langmem` dialect: LangMem 0.0.30's ``manage_memory`` and
``search_memory``, and a LangGraph ``BaseStore`` over HTTP for the real
package.

- ``tools.py``: the dialect and its MCP tools;
- ``namespaces.py``: LangMem's namespace and tool-description rules, shared by
  the tools and the client;
- ``routes.py``: the LangGraph store endpoint, ``POST /api/langmem/store/``;
- ``client.py``: ``MemprojStore`` (the store's client) and the tool factories.

Nothing is imported here: ``client`` and ``namespaces`` import without Django."""
