"""A tool error, in every dialect, through a real MCP client: its text is the
dialect's coded error and it carries no structured content. Structured content
beside it used to be a second answer (the core code, no message), and the MCP
Inspector validates structured content against the tool's outputSchema even
when isError is set, so it showed a schema complaint instead of the message."""

from __future__ import annotations

import json
import uuid

import pytest

from mcp_server.dialect import ERROR_CODE_META_KEY
from mcp_server.registry import TOOLSETS

pytestmark = pytest.mark.django_db(transaction=True)


def dialect_code(toolset: str, text: str) -> str:
    """The code each dialect's error text carries, in that dialect's shape."""
    if toolset in ("pce", "memento"):
        return json.loads(text)["error"]["code"]
    if toolset == "memory":
        assert text.startswith("[") and "] " in text, text
        return text[1 : text.index("]")]
    if toolset == "langmem":
        return text.split(":", 1)[0]
    assert toolset == "roampal" and text.startswith("Error: "), text
    return "Error"


# The code a schema violation has in each dialect's own vocabulary.
INVALID = {
    "memory": "INVALID_ARGUMENT",
    "memento": "INVALID_PARAMETER",
    "langmem": "ValueError",
    "pce": "VALIDATION_ERROR",
    "roampal": "Error",
}


# Tools that speak otherwise than their dialect (Dialect.tool's render_error).
PLAIN_TEXT_TOOLS = {("memento", "remember"), ("memento", "recall")}


def test_every_registered_dialect_is_covered():
    assert set(INVALID) == set(TOOLSETS)


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_a_tool_error_is_the_dialects_text_and_nothing_structured(member, mcp_client_for, toolset):
    async with mcp_client_for(member, toolset) as client:
        tools = (await client.list_tools()).tools
        for tool in tools:
            result = await client.call_tool(tool.name, {"no_such_argument": 1})
            assert result.is_error, tool.name
            assert result.structured_content is None, (tool.name, result.structured_content)
            assert len(result.content) == 1
            text = result.content[0].text
            if (toolset, tool.name) in PLAIN_TEXT_TOOLS:
                # The Memento server's own tools answer in plain sentences.
                assert text[:1].isupper() and "argument" in text and not text.startswith("{"), (tool.name, text)
            else:
                assert dialect_code(toolset, text) == INVALID[toolset], (tool.name, text)
            # The message is there (the first schema problem: a missing or an unknown argument).
            assert "argument" in text, text
            # The core code stays available beside the text (the HTTP surface's status uses it).
            assert (result.meta or {}).get(ERROR_CODE_META_KEY) == "INVALID_ARGUMENT"


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_an_unknown_tool_is_the_dialects_text_and_nothing_structured(member, mcp_client_for, toolset):
    async with mcp_client_for(member, toolset) as client:
        result = await client.call_tool("no_such_tool", {})
    assert result.is_error and result.structured_content is None
    assert dialect_code(toolset, result.content[0].text) == INVALID[toolset]


async def test_an_error_raised_inside_a_tool_has_nothing_structured(member, mcp_client_for):
    """Not only the argument contract: a domain error from the core (an unknown
    memory) too, on a tool that advertises an outputSchema."""
    async with mcp_client_for(member, "memento") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(
            "supersede_memory", {"old_memory_id": str(uuid.uuid4()), "new_memory_id": str(uuid.uuid4())}
        )
    assert tools["supersede_memory"].output_schema is not None
    assert result.is_error and result.structured_content is None
    assert dialect_code("memento", result.content[0].text) == "MEMORY_NOT_FOUND"
    assert json.loads(result.content[0].text)["error"]["message"]


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_an_unknown_prompt_is_invalid_params_in_the_dialects_vocabulary(member, mcp_client_for, toolset):
    from mcp.shared.exceptions import MCPError

    async with mcp_client_for(member, toolset) as client:
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("nope")
    error = refused.value.error
    assert error.code == -32602, error
    assert dialect_code(toolset, error.message) == INVALID[toolset], error.message
    assert "there is no prompt 'nope'" in error.message and error.data == {"code": "INVALID_ARGUMENT"}
