"""pce cursors as a client may tamper with them: an offset other than the
non-negative decimal a cursor is issued with is refused as any cursor the tool
did not return is (VALIDATION_ERROR), never read as Python's int() reads it
("-4" a page from the tail of the ranking, " 1", "1_0")."""

from __future__ import annotations

import base64

import pytest

from tests.mcp_server.test_pce_active_contexts import AT, _error, _ok

pytestmark = pytest.mark.django_db(transaction=True)

CLAIMS = [
    "Cancel API endpoints are named POST /subscriptions/{id}/cancel",
    "Cancel requests are processed asynchronously by a worker queue",
    "The cancel endpoint requires an idempotency key header",
    "Cancel API responses carry the subscription's final state",
    "A cancel API call on a cancelled subscription answers 409",
]
GARBAGE = "cursor is not one this tool returned; start again without a cursor."


@pytest.fixture
def pce(mcp_client_for):
    return lambda identity: mcp_client_for(identity, "pce")


def _encoded(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decoded(cursor: str) -> str:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()


async def _store_claims(client) -> None:
    for text in CLAIMS:
        await _ok(client, "pce.memory.upsert", text=text, scope="project", provenance={"at": AT})


@pytest.mark.parametrize("offset", ["-4", "-1", " 1", "1 ", "1_0", "+2", "２", "201", "9" * 30])
async def test_a_search_cursor_with_an_offset_it_was_not_issued_with_is_refused(offset, member, pce):
    async with pce(member) as client:
        await _store_claims(client)
        first = await _ok(client, "pce.memory.search", query="cancel API", top_k=2)
        assert _decoded(first["next_cursor"]) == "s:q:2"
        error = await _error(client, "pce.memory.search", query="cancel API", top_k=2, cursor=_encoded(f"s:q:{offset}"))
        garbage = await _error(client, "pce.memory.search", query="cancel API", top_k=2, cursor="not-a-cursor")
    assert error == garbage
    assert (error["code"], error["message"]) == ("VALIDATION_ERROR", GARBAGE)


@pytest.mark.parametrize("offset", ["-4", "-1", " 1", "1_0", "201"])
async def test_an_activate_cursor_with_an_offset_it_was_not_issued_with_is_refused(offset, member, pce):
    async with pce(member) as client:
        await _store_claims(client)
        first = await _ok(client, "pce.memory.activate", q="cancel API", top_k=2)
        kind, handle, issued = _decoded(first["next_cursor"]).split(":")
        assert (kind, issued) == ("a", "2")
        # The issued cursor pages; the same context at another offset does not.
        assert (await _ok(client, "pce.memory.activate", q="cancel API", top_k=2, cursor=first["next_cursor"]))[
            "claims"
        ]
        error = await _error(
            client, "pce.memory.activate", q="cancel API", top_k=2, cursor=_encoded(f"a:{handle}:{offset}")
        )
    assert (error["code"], error["message"]) == ("VALIDATION_ERROR", GARBAGE)
