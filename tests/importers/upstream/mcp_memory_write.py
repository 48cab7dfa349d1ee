"""Writes a real memory.jsonl with the official MCP memory server (npm
@modelcontextprotocol/server-memory, installed by `make import-test-venv`),
driven over stdio by the MCP Python SDK: entities with observations, relations,
added and deleted observations, a deleted entity. Prints what the graph holds
(read_graph) as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent

ROOT = Path(__file__).resolve().parents[3]
SERVER = (
    ROOT / ".venv-import" / "node" / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
)

PEOPLE = ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret"]


async def write(path: str) -> dict:
    params = StdioServerParameters(command="node", args=[str(SERVER)], env={**os.environ, "MEMORY_FILE_PATH": path})
    async with stdio_client(params) as (read, write_), ClientSession(read, write_) as session:
        await session.initialize()

        async def call(tool: str, **arguments: object) -> None:
            result = await session.call_tool(tool, arguments)
            # .venv-import's mcp 1.x spells it isError; mypy checks against 2.x (is_error).
            assert not result.isError, result.content  # type: ignore[attr-defined]

        await call(
            "create_entities",
            entities=[
                {"name": name, "entityType": "person", "observations": [f"{name} writes code in language {i}"]}
                for i, name in enumerate(PEOPLE)
            ]
            + [{"name": "Analytical Engine", "entityType": "machine", "observations": ["Designed in 1837"]}],
        )
        await call(
            "add_observations",
            observations=[
                {"entityName": name, "contents": [f"{name} likes chess", f"{name} lives in city {i}"]}
                for i, name in enumerate(PEOPLE)
            ],
        )
        await call(
            "create_relations",
            relations=[{"from": "Ada", "to": "Analytical Engine", "relationType": "programmed"}]
            + [{"from": a, "to": b, "relationType": "knows"} for a, b in zip(PEOPLE, PEOPLE[1:], strict=False)],
        )
        await call("delete_observations", deletions=[{"entityName": "Ken", "observations": ["Ken likes chess"]}])
        await call("delete_entities", entityNames=["Margaret"])
        result = await session.call_tool("read_graph", {})
        block = result.content[0]
        assert isinstance(block, TextContent), block
        text = block.text
    return json.loads(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(write(args.file))))


if __name__ == "__main__":
    main()
