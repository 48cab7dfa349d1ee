from types import ModuleType

from mcp_server.toolsets import memory

# toolset name -> module with INSTRUCTIONS and register(server, ctx)
TOOLSETS: dict[str, ModuleType] = {"memory": memory}
