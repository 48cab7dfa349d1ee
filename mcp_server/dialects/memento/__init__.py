"""The `memento` dialect: Memento MCP's memories with similar-memory
suggestions, and the Memento server's ``remember`` / ``recall``. ``tools.py``:
the dialect and its tools."""
