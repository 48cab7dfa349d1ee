"""pce.memory.search pages with a keyset cursor: the last claim shown (score,
created_at, id) and the instant and channel scale its ranking was computed at.
Found through the MCP SDK client: the cursor was an offset into the ranking
computed again, so forgetting a claim shown on page 1 made page 2 start one
claim further down and skip a claim never shown. A search stores nothing (no
active context), so the cursor is all the next page has."""

from __future__ import annotations

import base64

import pytest
from asgiref.sync import sync_to_async

from memory.models import Kind, Memory
from memory.services.memories import memory_forget
from tests.mcp_server import test_pce_cursors
from tests.mcp_server.test_pce_active_contexts import AT, _error, _ok
from tests.mcp_server.test_pce_cursors import GARBAGE

pytestmark = pytest.mark.django_db(transaction=True)

CLAIMS = [
    *test_pce_cursors.CLAIMS,
    "Cancel API errors are logged with the subscription id",
    "The cancel API is rate limited to ten calls a minute",
]
QUERY = "cancel API subscription"


def _texts(page: dict) -> list[str]:
    return [item["claim"]["text"] for item in page["items"]]


def _forget(caller, text: str) -> None:
    memory = Memory.objects.get(tenant_id=caller.tenant_id, content=text)
    memory_forget(caller=caller, kind=Kind.FACT, memory_id=memory.pk)


async def _pages_after(client, page: dict, top_k: int) -> list[str]:
    shown = []
    while page.get("next_cursor"):
        page = await _ok(client, "pce.memory.search", query=QUERY, top_k=top_k, cursor=page["next_cursor"])
        shown += _texts(page)
    return shown


# The first claim of page 1 is the best match: forgetting it changes each
# channel's best score, which the ranking's scores are normalised by.
@pytest.mark.parametrize("forgotten", [0, 1, 2], ids=["first", "middle", "last"])
async def test_forgetting_a_claim_shown_on_page_1_skips_and_repeats_no_claim(forgotten, member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        for text in CLAIMS:
            await _ok(client, "pce.memory.upsert", text=text, scope="project", provenance={"at": AT})
        everything = _texts(await _ok(client, "pce.memory.search", query=QUERY, top_k=50))
        assert len(everything) >= 6  # pages 1 and 2 are full
        first = await _ok(client, "pce.memory.search", query=QUERY, top_k=3)
        page_1 = _texts(first)
        assert page_1 == everything[:3] and first["has_more"]
        await sync_to_async(_forget)(member.caller, page_1[forgotten])
        later = await _pages_after(client, first, top_k=3)
    shown = page_1 + later
    assert len(shown) == len(set(shown)), f"repeated: {shown}"
    assert sorted(shown) == sorted(everything), f"skipped: {set(everything) - set(shown)}"
    assert later == everything[3:]


async def test_a_claim_stored_after_page_1_moves_no_claim_to_another_page(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        for text in CLAIMS[:-1]:
            await _ok(client, "pce.memory.upsert", text=text, scope="project", provenance={"at": AT})
        everything = _texts(await _ok(client, "pce.memory.search", query=QUERY, top_k=50))
        first = await _ok(client, "pce.memory.search", query=QUERY, top_k=2)
        await _ok(client, "pce.memory.upsert", text=CLAIMS[-1], scope="project", provenance={"at": AT})
        later = await _pages_after(client, first, top_k=2)
    shown = _texts(first) + [text for text in later if text != CLAIMS[-1]]
    assert shown == everything


def _encoded(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decoded(cursor: str) -> str:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()


# Each field of a keyset as a client may tamper with it: what int() or float()
# would also read (a sign, spaces, underscores, other scripts' digits, nan,
# inf), a negative score or scale, a field missing or added, another id form.
TAMPERINGS = {
    "instant with a plus sign": lambda f: ["+" + f[0], *f[1:]],
    "instant with a space": lambda f: [" " + f[0], *f[1:]],
    "instant with an underscore": lambda f: [f[0][:3] + "_" + f[0][3:], *f[1:]],
    "instant in Arabic-Indic digits": lambda f: [
        f[0].translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
        *f[1:],
    ],
    "instant past any date": lambda f: ["9" * 30, *f[1:]],
    "scale nan": lambda f: [f[0], "nan", *f[2:]],
    "scale inf": lambda f: [f[0], f[1], "inf", *f[3:]],
    "negative score": lambda f: [*f[:3], "-0.5", *f[4:]],
    "score not as written": lambda f: [*f[:3], "0.50", *f[4:]],
    "upper-case id": lambda f: [*f[:5], f[5].upper()],
    "short id": lambda f: [*f[:5], f[5][:31]],
    "a field missing": lambda f: f[:5],
    "a field added": lambda f: [*f, "1"],
    "an offset": lambda f: ["3"],
}


async def test_a_tampered_search_cursor_is_refused(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        for text in CLAIMS:
            await _ok(client, "pce.memory.upsert", text=text, scope="project", provenance={"at": AT})
        first = await _ok(client, "pce.memory.search", query=QUERY, top_k=2)
        kind, handle, position = _decoded(first["next_cursor"]).split(":")
        fields = position.split(",", 5)
        assert (kind, handle, len(fields)) == ("s", "k", 6)
        errors = {}
        for name, tamper in TAMPERINGS.items():
            cursor = _encoded(f"{kind}:{handle}:{','.join(tamper(list(fields)))}")
            error = await _error(client, "pce.memory.search", query=QUERY, top_k=2, cursor=cursor)
            errors[name] = (error["code"], error["message"])
        # An offset cursor as the search issued before: start again.
        old = await _error(client, "pce.memory.search", query=QUERY, top_k=2, cursor=_encoded("s:q:2"))
        paged = await _ok(client, "pce.memory.search", query=QUERY, top_k=2, cursor=first["next_cursor"])
    assert errors == dict.fromkeys(TAMPERINGS, ("VALIDATION_ERROR", GARBAGE))
    assert (old["code"], old["message"]) == ("VALIDATION_ERROR", GARBAGE)
    assert paged["items"] and not set(_texts(paged)) & set(_texts(first))
