"""Two web processes behind haproxy, with PostgreSQL and Redis as ordinary
servers on loopback TCP (tests/harness/scaleout.py, as bench/scaleout.py runs
them): what one process learns, the other honours. A token revoked by another
process is refused by both on their next request, inside the window they keep
verified tokens; a tenant's rate limit is one count over both; a pce active
context made through one process pages through the other; a policy applied by a
third process holds in both from their next request.

Each check addresses the two processes directly, so that which one answers is
known; the load balancer in front of them answers the same calls."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.paths import BASE_DIR
from tests.harness.scaleout import Deployment, _clean_environ
from tests.harness.surfaces.mcp_http import MCP_HEADERS

pytestmark = [
    pytest.mark.xdist_group("scaleout"),
    pytest.mark.skipif(
        not (shutil.which("haproxy") or Path("/usr/sbin/haproxy").exists()),
        reason="haproxy is not installed (scripts/install_loadbalancer.sh)",
    ),
]

AT = "2025-01-31T12:00:00Z"
# The window each web process keeps a verified token (policy.tokencache.TOKEN_CACHE_SECONDS).
TOKEN_CACHE_SECONDS = 5.0


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    running = Deployment()
    try:
        running.start_data_tier(shared_buffers="128MB")
        running.manage("migrate", "--noinput")
        running.start_web(2)
        running.balance(2)
        yield running
    finally:
        running.close()


def _tenant(deployment: Deployment, policy_yaml: str | None = None) -> tuple[str, str]:
    """A fresh tenant (slug, token), its policy applied by the operator's command when given."""
    slug = f"t{uuid.uuid4().hex[:10]}"
    token = deployment.manage("issue_token", "--tenant", slug, "--principal", "agent").strip().splitlines()[-1]
    if policy_yaml is not None:
        deployment.manage("policy_apply", "--tenant", slug, "--file", "-", stdin=policy_yaml)
    return slug, token


def _post(base: str, path: str, token: str, method: str, params: dict[str, Any]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    return httpx.post(base + path, json=body, headers=headers, timeout=120)


def _tool(base: str, path: str, token: str, name: str, **arguments: Any) -> dict[str, Any]:
    response = _post(base, path, token, "tools/call", {"name": name, "arguments": arguments})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


def _webs(deployment: Deployment) -> tuple[str, str]:
    return deployment.webs[0][1], deployment.webs[1][1]


def _third_process(deployment: Deployment, *, setup: str, action: str) -> subprocess.Popen[str]:
    """A Django shell in a process of its own, its imports (``setup``) done
    and waiting: told to go (``_go``), it runs ``action``, so what it does
    takes milliseconds when asked."""
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "shell",
            "--no-imports",
            "-c",
            f"import sys\n{setup}print('ready', flush=True)\nsys.stdin.readline()\n{action}",
        ],
        cwd=BASE_DIR,
        env={**_clean_environ(), **deployment.service_env()},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        process.kill()
        pytest.fail(f"the third process did not start: {process.communicate(timeout=60)}")
    return process


def _go(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()


def _revoked_elsewhere(deployment: Deployment) -> tuple[list[httpx.Response], float]:
    """Each web process verifies (and keeps) a fresh token, a third process
    revokes it, and each is asked again: the answers, and how long after the
    first verification the last of them came."""
    slug, token = _tenant(deployment)
    first, second = _webs(deployment)
    # The revocation runs in a third process (as the admin's or an operator's
    # shell would), already started so that it takes milliseconds when asked.
    revoker = _third_process(
        deployment,
        setup="from policy.models import ApiToken\nfrom policy.services.tokens import token_revoke\n",
        action=f"print(token_revoke(ApiToken.objects.filter(principal__tenant__slug='{slug}')), flush=True)\n",
    )
    try:
        assert revoker.stdout is not None
        verified_at = time.monotonic()
        for base in (first, second, deployment.url):  # each process verifies and keeps the token
            assert _post(base, "/mcp/memory", token, "tools/list", {}).status_code == 200
        _go(revoker)
        assert revoker.stdout.readline().strip() == "1"
        answers = [_post(base, "/mcp/memory", token, "tools/list", {}) for base in (first, second, deployment.url)]
        refused_within = time.monotonic() - verified_at
    finally:
        revoker.communicate(timeout=60)
    return answers, refused_within


def test_a_token_revoked_elsewhere_is_refused_by_every_web_process_at_once(deployment: Deployment) -> None:
    # Only a round that ends inside the window the processes keep the token
    # shows the shared generation at work: after it, their caches would have
    # let the token go anyway. A loaded machine can make a round that slow, so
    # a slow round that was refused throughout is tried again with a new token;
    # a round with any answer but the refusal ends the test at once.
    for _ in range(3):
        answers, refused_within = _revoked_elsewhere(deployment)
        if refused_within < TOKEN_CACHE_SECONDS or any(a.status_code != 401 for a in answers):
            break
    # Refused as a token that was sent but is no longer valid (RFC 6750's invalid_token).
    assert [a.status_code for a in answers] == [401, 401, 401], [a.text for a in answers]
    assert all('error="invalid_token"' in a.headers.get("www-authenticate", "") for a in answers)
    assert all(a.json()["error"]["data"]["code"] == "PERMISSION_DENIED" for a in answers)
    # Without the shared generation both would still have served the token from their caches.
    assert refused_within < TOKEN_CACHE_SECONDS, refused_within


def test_a_tenants_rate_limit_is_one_count_over_every_web_process(deployment: Deployment) -> None:
    _slug, token = _tenant(
        deployment, "version: '1.0.0'\nrate_limit: { limit: 6, window_seconds: 600, algorithm: sliding }\n"
    )
    first, second = _webs(deployment)
    answers = [_post(base, "/mcp/memory", token, "tools/list", {}) for base in (first, second) * 4]
    assert [a.status_code for a in answers] == [200] * 6 + [429] * 2, [a.text for a in answers]
    # One count: each process's answer says how many calls the other left.
    assert [int(a.headers["x-ratelimit-remaining"]) for a in answers] == [5, 4, 3, 2, 1, 0, 0, 0]
    refused = answers[-1].json()
    assert refused["error"]["data"]["code"] == "RATE_LIMIT" and int(answers[-1].headers["retry-after"]) >= 1
    # Through the load balancer too.
    assert _post(deployment.url, "/mcp/memory", token, "tools/list", {}).status_code == 429


def test_a_pce_active_context_made_on_one_process_pages_on_the_other(deployment: Deployment) -> None:
    _slug, token = _tenant(deployment, "version: '1.0.0'\n")
    first, second = _webs(deployment)
    texts = [f"The deploy of service {name} must wait for the API freeze" for name in ("alpha", "beta", "gamma")]
    for text in texts:
        _tool(first, "/mcp/pce", token, "pce_memory_upsert", text=text, scope="project", provenance={"at": AT})
    opened = _tool(first, "/mcp/pce", token, "pce_memory_activate", q="deploy API freeze", top_k=1)["data"]
    assert opened["has_more"] and opened["next_cursor"]
    pages = [opened]
    for base in (second, deployment.url):
        pages.append(
            _tool(base, "/mcp/pce", token, "pce_memory_activate", q="deploy API freeze", top_k=1,
                  cursor=pages[-1]["next_cursor"])["data"]
        )  # fmt: skip
    assert {page["active_context_id"] for page in pages} == {opened["active_context_id"]}
    seen = [page["claims"][0]["claim"]["text"] for page in pages]
    assert sorted(seen) == sorted(texts), seen
    assert not pages[-1]["has_more"]


# A policy applied from a third process holds in every web process from its next
# request: both had verified the token, kept the tenant's policy version and the
# token's rate rule; the apply's generation in Redis makes each forget them. Only
# a round that ends inside the window the processes keep what they learned shows
# the generation at work: a slower round is tried again with a new tenant, and
# skipped if none is quick enough; its assertions hold either way.
OLD = "version: '1.0.0'\nrate_limit: { limit: 100, window_seconds: 600, algorithm: sliding }\n"
NEW = "version: '1.1.0'\nrate_limit: { limit: 3, window_seconds: 600, algorithm: sliding }\n"


def _search(base: str, token: str) -> httpx.Response:
    return _post(base, "/mcp/pce", token, "tools/call", {"name": "pce_memory_search", "arguments": {"query": "x"}})


def _version(answer: httpx.Response) -> Any:
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]["structuredContent"]["policy_version"]


def _applied_elsewhere(deployment: Deployment, tmp_path: Path) -> tuple[list[httpx.Response], float]:
    """Each web process serves the tenant under the old policy, a third
    process applies the new one, and each is asked again: the answers, and how
    long after the first of them the last came."""
    slug, token = _tenant(deployment, OLD)
    first, second = _webs(deployment)
    policy = tmp_path / f"{slug}.yaml"
    policy.write_text(NEW)
    applier = _third_process(
        deployment,
        setup="from django.core.management import call_command\n",
        action=(
            f"call_command('policy_apply', '--tenant', '{slug}', '--file', '{policy}')\n"
            "print('\\napplied', flush=True)\n"
        ),
    )
    try:
        assert applier.stdout is not None
        began = time.monotonic()
        for base in (first, second):  # each process verifies the token, keeps the version and the rule
            assert _version(_search(base, token)) == "1.0.0"
        _go(applier)
        while (line := applier.stdout.readline()) and line.strip() != "applied":
            pass
        assert line.strip() == "applied"
        answers = [_search(base, token) for base in (first, second, first, second)]
        within = time.monotonic() - began
    finally:
        applier.communicate(timeout=60)
    return answers, within


def test_a_policy_applied_elsewhere_holds_in_every_web_process_at_once(deployment, tmp_path):
    for _ in range(3):
        answers, within = _applied_elsewhere(deployment, tmp_path)
        if within < TOKEN_CACHE_SECONDS:
            break
    # The new rate limit (3 in the window), one count over both processes,
    # with the new version in every answer it let through.
    assert [a.status_code for a in answers] == [200, 200, 200, 429], [a.text for a in answers]
    assert [_version(a) for a in answers[:3]] == ["1.1.0"] * 3
    assert [a.headers["x-ratelimit-limit"] for a in answers] == ["3"] * 4
    if within >= TOKEN_CACHE_SECONDS:
        pytest.skip(f"no round ended within {TOKEN_CACHE_SECONDS:g} s ({within:.1f} s): the caches had expired anyway")
