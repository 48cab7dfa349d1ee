"""Probe 3, in a real browser (headless Debian chromium, Playwright): what an
agent wrote is shown whole and in its place. A memory of one word of 16,000
characters (a subject, a tag, a metadata value of hundreds) widened the review
page by some 180,000 px, and a read-only field's row cut its text off; a
direction override (U+202E) in a memory's text, a tag or a metadata value
turned the admin's own words after it around (the supersession chain's date,
the next tag, the next JSON member)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from memory.models import ConflictCandidate, Memory
from memory.services.memories import fact_store, rule_store
from tests.admin.conftest import PASSWORD
from tests.admin.test_browser import LAUNCH_ARGS, browser_env, chromium  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser

WIDTH = 1400

# Elements without children that reach past the window (inside a scrolling or
# clipping box the page itself does not widen, so the page's width is not enough).
TOO_WIDE = """() => {
    const right = document.documentElement.clientWidth;
    return {
        page: document.documentElement.scrollWidth - right,
        elements: [...document.querySelectorAll('body *')]
            .filter(e => e.children.length === 0 && e.getBoundingClientRect().right > right + 1)
            .slice(0, 5)
            .map(e => `${e.tagName}.${e.className} ${Math.round(e.getBoundingClientRect().width)} px`),
    };
}"""

# Each text holding a direction control: the text after it, up to the end of the
# box its reordering stops at (a block, a table cell, or an isolating element
# such as <bdi>), must be empty; otherwise the admin's own words are reordered.
REORDERED = r"""() => {
    const controls = /[\u202a-\u202e\u2066-\u2069]/;
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const found = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (!controls.test(node.data)) continue;
        let box = node.parentElement;
        while (box !== document.body) {
            const style = getComputedStyle(box);
            if (!style.display.startsWith('inline') || style.unicodeBidi.includes('isolate')
                || style.unicodeBidi === 'plaintext') break;
            box = box.parentElement;
        }
        const after = document.createRange();
        after.setStartAfter(node);
        after.setEnd(box, box.childNodes.length);
        const rest = after.toString().trim();
        const text = JSON.stringify(node.data.slice(-20));
        if (rest) found.push(`${box.tagName}.${box.className}: ${text} then ${JSON.stringify(rest.slice(0, 40))}`);
    }
    return found;
}"""


@contextmanager
def logged_in_page(executable: str, live_server: Any, username: str) -> Iterator[Any]:
    """A page of headless Chromium, logged in to the admin as ``username``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto(f"{live_server.url}/admin/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#user-tools")
            yield page
        finally:
            browser.close()


def review_pages(live_server: Any, newer: Memory, older: Memory, conflict: ConflictCandidate) -> list[str]:
    return [
        f"{live_server.url}/admin/memory/memory/",
        f"{live_server.url}/admin/memory/memory/{newer.pk}/change/",
        f"{live_server.url}/admin/memory/memory/{older.pk}/change/",
        f"{live_server.url}/admin/dashboard/tenant-a/",
        f"{live_server.url}/admin/memory/conflictcandidate/",
        f"{live_server.url}/admin/memory/conflictcandidate/{conflict.pk}/change/",
    ]


def test_one_long_word_widens_no_page(chromium, live_server, admin_a, browser_env):  # noqa: F811
    caller = admin_a.caller
    subject, predicate = "S" * 200, "P" * 200
    older = fact_store(
        caller=caller,
        subject=subject,
        predicate=predicate,
        content="O" * 16_000,
        tags=["T" * 64],
        metadata={"k": "v" * 5000},
    ).memory
    newer = fact_store(
        caller=caller, subject=subject, predicate=predicate, content="N" * 16_000, metadata={"K" * 200: "w" * 5000}
    ).memory
    rule = rule_store(caller=caller, content="R" * 16_000, scope="x" * 100)
    conflict = ConflictCandidate.objects.create(
        tenant=admin_a.tenant, memory=newer, other=rule, kind="contradiction", similarity=0.5, reason="Z" * 200
    )

    with logged_in_page(chromium, live_server, admin_a.user.username) as page:
        for url in review_pages(live_server, newer, older, conflict):
            assert page.goto(url).status == 200, url
            assert page.evaluate(TOO_WIDE) == {"page": 0, "elements": []}, url
        # The whole word is there to read, on the page and in its read-only field.
        page.goto(f"{live_server.url}/admin/memory/memory/{newer.pk}/change/")
        assert page.inner_text("#mp-content") == "N" * 16_000
        assert page.inner_text(".field-content div.readonly") == "N" * 16_000


def test_a_direction_override_turns_round_only_the_agents_own_text(chromium, live_server, admin_a, browser_env):  # noqa: F811
    caller = admin_a.caller
    override = "\u202e"
    subject, predicate = f"deploy{override}", f"day{override}"
    older = fact_store(
        caller=caller,
        subject=subject,
        predicate=predicate,
        content=f"Deploys happen on Tuesdays {override}",
        tags=[f"ops{override}", "billing"],
        metadata={"note": f"see{override}", "owner": "alice"},
    ).memory
    newer = fact_store(
        caller=caller, subject=subject, predicate=predicate, content=f"Deploys happen on Thursdays {override}"
    ).memory
    rule = rule_store(caller=caller, content=f"Never deploy on Fridays {override}")
    conflict = ConflictCandidate.objects.create(
        tenant=admin_a.tenant, memory=newer, other=rule, kind="contradiction", similarity=0.5, reason=f"why{override}"
    )

    with logged_in_page(chromium, live_server, admin_a.user.username) as page:
        for url in review_pages(live_server, newer, older, conflict):
            assert page.goto(url).status == 200, url
            assert page.evaluate(REORDERED) == [], url
        # The text itself is kept: the override is in the page, the metadata's as its JSON escape.
        page.goto(f"{live_server.url}/admin/memory/memory/{older.pk}/change/")
        assert page.inner_text(".field-tag_list div.readonly") == f"ops{override}, billing"
        assert page.inner_text(".field-metadata_json div.readonly") == '{"note": "see\\u202e", "owner": "alice"}'
