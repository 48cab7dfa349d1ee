"""End to end in a real browser: headless Debian chromium driven by Playwright
against the live server. A tenant admin logs in, opens the dashboard and a
memory's detail page, promotes a rule, and cannot reach tenant B's memory by URL.
A new superuser's first hour: the site's name, adding a memory through the form
and finding it in the list, the list's columns at 1400 and 1920 px, and audit
events naming their actors.
The dashboard screenshot is the README's (docs/dashboard.png), refreshed with
MEMPROJ_UPDATE_SCREENSHOTS=1."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from memory.models import ConflictCandidate, EmbeddingStatus, Memory, MemoryEvent
from memory.services.feedback import memory_feedback
from memory.services.memories import episode_store, fact_store, rule_store
from tests.admin.conftest import PASSWORD

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"

INSTALLER = Path(__file__).resolve().parents[2] / "scripts" / "install_test_browser.sh"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, installed by the project's own script when missing
    (scripts/test.sh runs it too); skipped only when it cannot be installed."""
    if not os.path.exists(CHROMIUM):
        subprocess.run([str(INSTALLER)], check=False, timeout=900)
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            "Debian chromium is not installed and scripts/install_test_browser.sh could not install it "
            "(it needs root): apt-get install chromium"
        )
    return CHROMIUM


def seed_tenant(caller, tenant) -> Memory:
    """A month of varied memories so the dashboard has something to show; returns a rule."""
    now = timezone.now()
    topics = ["deploys", "billing", "the on-call rota", "the staging database", "code review", "release notes"]
    for day in range(0, 28, 2):
        for i in range(1 + day % 3):
            memory = episode_store(
                caller=caller,
                content=f"Agent discussed {topics[(day + i) % len(topics)]} (day {day}, #{i})",
                butler="ops",
            )
            Memory.objects.filter(pk=memory.pk).update(created_at=now - timedelta(days=day, hours=i))
    facts = [
        ("team", "standup", "Standup is at 09:30 Brussels time"),
        ("team", "deploy-day", "Deploys happen on Tuesdays and Thursdays"),
        ("user", "editor", "Alice uses Helix as her editor"),
        ("billing", "provider", "Invoices are sent through Stripe"),
        ("db", "staging", "Staging runs PostgreSQL 18 with pgvector"),
    ]
    for n, (subject, predicate, content) in enumerate(facts):
        memory = fact_store(caller=caller, subject=subject, predicate=predicate, content=content).memory
        Memory.objects.filter(pk=memory.pk).update(created_at=now - timedelta(days=3 * n + 1))
    fact_store(caller=caller, subject="team", predicate="standup", content="Standup moved to 10:00 Brussels time")
    rules = [
        rule_store(caller=caller, content="Run the migrations check before every deploy"),
        rule_store(caller=caller, content="Never rotate secrets on a Friday"),
        rule_store(caller=caller, content="Answer billing questions with the invoice id first"),
    ]
    for _ in range(6):
        memory_feedback(caller=caller, memory_id=rules[0].pk, signal="helpful")
    for _ in range(3):
        memory_feedback(caller=caller, memory_id=rules[2].pk, signal="harmful")
    pending = episode_store(caller=caller, content="Agent noted a flaky test in CI", butler="ops")
    Memory.objects.filter(pk=pending.pk).update(embedding_status=EmbeddingStatus.PENDING)
    a = fact_store(
        caller=caller, subject="office", predicate="wifi", content="Office wifi is called memproj-guest"
    ).memory
    b = fact_store(
        caller=caller, subject="office", predicate="network", content="Guest wifi is memproj-visitors"
    ).memory
    ConflictCandidate.objects.get_or_create(
        memory=b, other=a, defaults={"tenant": tenant, "kind": "contradiction", "similarity": 0.71}
    )
    return rules[1]


@pytest.fixture
def browser_env(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM checks
    # between page steps are plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def test_tenant_admin_reviews_in_a_real_browser(chromium, live_server, admin_a, admin_b, tmp_path, browser_env):
    from playwright.sync_api import sync_playwright

    rule = seed_tenant(admin_a.caller, admin_a.tenant)
    secret_b = fact_store(caller=admin_b.caller, subject="b", predicate="secret", content="Tenant B secret").memory

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{live_server.url}/admin/login/")
            page.fill("#id_username", admin_a.user.username)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#user-tools")

            # The dashboard: the tenant admin lands on their own tenant.
            page.goto(f"{live_server.url}/admin/dashboard/")
            assert page.url.endswith("/admin/dashboard/tenant-a/")
            page.wait_for_selector("#mp-per-day svg rect")
            assert "tenant-b" not in page.content()
            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("MEMPROJ_UPDATE_SCREENSHOTS"):
                # Refresh the README's picture only when asked, so a test run
                # does not leave a tracked file modified.
                shutil.copyfile(shot, DOCS_SCREENSHOT)

            # The memory list, searched with the tools' hybrid search.
            page.goto(f"{live_server.url}/admin/memory/memory/?q=when+may+I+rotate+credentials")
            first_row = page.inner_text("#result_list tbody tr:first-child")
            assert "Never rotate secrets on a Friday" in first_row
            page.screenshot(path=str(tmp_path / "memory-list.png"), full_page=True)

            # A memory's detail page, then a review action: promote the rule.
            page.goto(f"{live_server.url}/admin/memory/memory/{rule.pk}/change/")
            assert "Never rotate secrets on a Friday" in page.inner_text("#mp-content")
            assert "effective confidence" in page.inner_text("#mp-scores")
            page.select_option("#mp-maturity", "established")
            page.click("#mp-set-maturity")
            page.wait_for_selector("ul.messagelist li.success")
            assert "Maturity set to established" in page.inner_text("ul.messagelist")
            assert "maturity_changed" in page.inner_text("#mp-events")
            page.screenshot(path=str(tmp_path / "memory-detail.png"), full_page=True)

            # Tenant B's memory by URL: not found, and nothing of it shown.
            response = page.goto(f"{live_server.url}/admin/memory/memory/{secret_b.pk}/change/")
            assert response is not None and response.status in (403, 404)
            assert "Tenant B secret" not in page.content()
            response = page.goto(f"{live_server.url}/admin/dashboard/tenant-b/")
            assert response is not None and response.status in (403, 404)
        finally:
            browser.close()

    rule.refresh_from_db()
    assert rule.maturity == "established"
    event = MemoryEvent.objects.filter(memory_id=rule.pk, event_type="maturity_changed").get()
    assert event.payload == {"from": "candidate", "to": "established", "manual": True, "reason": "admin review"}
    assert event.actor_principal_id == admin_a.principal.id


# The list must show every column without a horizontal scrollbar at the window
# widths reviewers use (a laptop's 1400 px, a desktop's 1920 px), with the side
# navigation and the filter panel open.
LIST_WIDTHS = (1400, 1920)

OVERFLOW = """() => {
    const results = document.querySelector('#changelist .results');
    const table = document.querySelector('#result_list');
    const right = results.getBoundingClientRect().right;
    const clipped = [...table.querySelectorAll('thead th')]
        .filter(th => th.getBoundingClientRect().right > right + 1)
        .map(th => th.innerText.trim());
    return {
        page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
        results: results.scrollWidth - results.clientWidth,
        clipped: clipped,
        columns: table.querySelectorAll('thead th').length,
        widths: [...table.querySelectorAll('thead th')]
            .map(th => [th.innerText.trim(), Math.round(th.getBoundingClientRect().width)]),
        navigation: !!document.querySelector('#nav-sidebar'),
    };
}"""


def test_first_hour_in_a_real_browser(chromium, live_server, superuser, admin_a, tmp_path, browser_env):
    """A new superuser's first visit: the site's name, adding a memory through
    the form and finding it in the list, the list's layout at common window
    widths, and the memory's history naming who did what."""
    from playwright.sync_api import sync_playwright

    seed_tenant(admin_a.caller, admin_a.tenant)
    long = "A long memory that wraps: " + "the staging database is rebuilt from the nightly snapshot " * 4
    episode_store(caller=admin_a.caller, content=long, butler="ops", tags=["ops", "staging", "database"])

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{live_server.url}/admin/login/")
            assert "memproj administration" in page.inner_text("#site-name")
            page.fill("#id_username", superuser.user.username)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#user-tools")
            assert page.title() == "Memories, tenants and access | memproj admin"
            assert "View site" not in page.inner_text("#user-tools")
            assert "API tokens" in page.inner_text("#content-main")

            # Add a memory from the list's button, as a new user would.
            page.goto(f"{live_server.url}/admin/memory/memory/")
            page.click(".object-tools a.addlink")
            page.wait_for_selector("#memory-add-form")
            assert page.title() == "Add memory | memproj admin"
            page.select_option("#id_tenant", str(admin_a.tenant.pk))
            assert page.is_checked("input[name=kind][value=fact]")
            # The form's script hides the other kinds' fields once it runs, which a
            # loaded machine delays past the form's appearance: wait for it (or time out).
            page.wait_for_selector("#id_butler", state="hidden")
            assert page.is_visible("#id_subject")
            page.check("input[name=kind][value=episode]")  # the form follows the kind
            page.wait_for_selector("#id_subject", state="hidden")
            assert page.is_visible("#id_butler")
            page.check("input[name=kind][value=fact]")
            page.fill("#id_subject", "office")
            page.fill("#id_predicate", "coffee")
            page.fill("#id_content", "The office coffee machine is on the third floor")
            page.screenshot(path=str(tmp_path / "memory-add.png"), full_page=True)
            page.click("#memory-add-form input[name=_save]")
            page.wait_for_selector("ul.messagelist li.success")
            assert "Stored fact" in page.inner_text("ul.messagelist")
            first_row = page.inner_text("#result_list tbody tr:first-child")
            assert "The office coffee machine is on the third floor" in first_row
            stored = Memory.objects.get(content="The office coffee machine is on the third floor")
            assert (stored.tenant_id, stored.subject, stored.predicate) == (admin_a.tenant.pk, "office", "coffee")

            # A service's refusal shows on its field, and nothing is stored.
            page.goto(f"{live_server.url}/admin/memory/memory/add/")
            page.select_option("#id_tenant", str(admin_a.tenant.pk))
            page.check("input[name=kind][value=episode]")
            page.fill("#id_content", "An episode without its agent")
            page.click("#memory-add-form input[name=_save]")
            page.wait_for_selector(".field-butler ul.errorlist")
            page.screenshot(path=str(tmp_path / "memory-add-error.png"), full_page=True)
            assert "butler must be" in page.inner_text(".field-butler ul.errorlist")
            assert page.is_visible("#id_butler")
            assert not Memory.objects.filter(content="An episode without its agent").exists()

            # The list at common window widths: no column cut off.
            for width in LIST_WIDTHS:
                page.set_viewport_size({"width": width, "height": 1000})
                page.goto(f"{live_server.url}/admin/memory/memory/")
                layout = page.evaluate(OVERFLOW)
                page.screenshot(path=str(tmp_path / f"memory-list-{width}.png"), full_page=True)
                assert layout["navigation"] and layout["columns"] == 9  # the side navigation is open
                assert layout["clipped"] == [], f"at {width} px these columns are cut off: {layout['clipped']}"
                assert layout["results"] <= 0 and layout["page"] <= 0, f"horizontal scrolling at {width} px: {layout}"

            # The history names who stored it and which superuser acted.
            page.set_viewport_size({"width": 1400, "height": 900})
            page.goto(f"{live_server.url}/admin/memory/memory/{stored.pk}/change/")
            history = page.inner_text("#mp-events")
            assert "root (superuser)" in history
            assert str(admin_a.principal.pk) not in history
            page.goto(f"{live_server.url}/admin/memory/memoryevent/")
            events = page.inner_text("#result_list")
            assert "alice" in events and "root (superuser)" in events
            assert str(admin_a.principal.pk) not in events
        finally:
            browser.close()
