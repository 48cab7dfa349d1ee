"""pce cursors as a client may tamper with them: an offset other than the
non-negative decimal a cursor is issued with is refused as any cursor the tool
did not return is (VALIDATION_ERROR), never read as Python's int() reads it
("-4" a page from the tail of the ranking, " 1", "1_0")."""

from __future__ import annotations

import base64
import json
import uuid

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
    """A search cursor is a keyset (the last claim shown), never an offset."""
    async with pce(member) as client:
        await _store_claims(client)
        first = await _ok(client, "pce.memory.search", query="cancel API", top_k=2)
        assert _decoded(first["next_cursor"]).startswith("s:k:")
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


# An activate cursor's handle is the context's id as 32 lowercase hex digits,
# then "." and its expiry as Unix seconds in ASCII decimal. Each tampering below
# names the same context and expiry to uuid.UUID() or int() (or, the bare ".",
# a handle with no expiry), so the lenient reading paged the live context.
TAMPERED_HANDLES = {
    "space before the expiry": lambda cid, exp: f"{cid}. {exp}",
    "space after the expiry": lambda cid, exp: f"{cid}.{exp} ",
    "newline after the expiry": lambda cid, exp: f"{cid}.{exp}\n",
    "plus sign": lambda cid, exp: f"{cid}.+{exp}",
    "underscore": lambda cid, exp: f"{cid}.{exp[:4]}_{exp[4:]}",
    "leading zero": lambda cid, exp: f"{cid}.0{exp}",
    "Arabic-Indic digits": lambda cid, exp: f"{cid}.{exp.translate(str.maketrans('0123456789', '٠١٢٣٤٥٦٧٨٩'))}",
    "fullwidth digits": lambda cid, exp: f"{cid}.{exp.translate(str.maketrans('0123456789', '０１２３４５６７８９'))}",
    "an empty expiry": lambda cid, exp: f"{cid}.",
    "an expiry past any date": lambda cid, exp: f"{cid}.{'9' * 30}",
    "upper-case id": lambda cid, exp: f"{cid.upper()}.{exp}",
    "hyphenated id": lambda cid, exp: f"{uuid.UUID(cid)}.{exp}",
    "braced id": lambda cid, exp: f"{{{cid}}}.{exp}",
}


async def test_an_activate_cursor_whose_context_handle_was_tampered_with_is_refused(member, pce):
    async with pce(member) as client:
        await _store_claims(client)
        first = await _ok(client, "pce.memory.activate", q="cancel API", top_k=2)
        kind, handle, offset = _decoded(first["next_cursor"]).split(":")
        context_id, expiry = handle.split(".")
        assert len(context_id) == 32 and expiry.isdigit()
        garbage = await _error(client, "pce.memory.activate", q="cancel API", top_k=2, cursor="not-a-cursor")
        answers = {}
        for name, tamper in TAMPERED_HANDLES.items():
            cursor = _encoded(f"{kind}:{tamper(context_id, expiry)}:{offset}")
            result = await client.call_tool("pce.memory.activate", {"q": "cancel API", "top_k": 2, "cursor": cursor})
            answers[name] = json.loads(result.content[0].text)["error"] if result.is_error else "paged"
        # The issued cursor still pages its context.
        paged = await _ok(client, "pce.memory.activate", q="cancel API", top_k=2, cursor=first["next_cursor"])
    assert paged["claims"] and paged["active_context_id"] == f"ac_{context_id}"
    assert (garbage["code"], garbage["message"]) == ("VALIDATION_ERROR", GARBAGE)
    assert answers == dict.fromkeys(TAMPERED_HANDLES, garbage)
