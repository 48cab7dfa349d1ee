"""End to end in a real browser: headless Debian chromium driven by Playwright
against the live server. A tenant admin logs in, opens the dashboard and a
memory's detail page, promotes a rule, and cannot reach tenant B's memory by URL.
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
