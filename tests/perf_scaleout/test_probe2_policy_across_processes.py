"""A policy applied from a third process holds in every web process from its
next request (docs/deployment.md, What holds across web processes): both had
verified the token, kept the tenant's policy version and the token's rate
rule; the apply's generation in Redis makes each forget them. Shown by the
version pce answers with and by the new rate limit, one count over both
processes.

Only a round that ends inside the window the processes keep what they
learned shows the generation at work (after it, their caches would have let
the old policy go anyway): a slower round is tried again with a new tenant,
and skipped if none is quick enough; its assertions hold either way."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.paths import BASE_DIR
from tests.harness.scaleout import Deployment, _clean_environ
from tests.perf_scaleout.test_across_processes import TOKEN_CACHE_SECONDS, _post, _tenant, _webs

pytestmark = [
    pytest.mark.xdist_group("scaleout"),
    pytest.mark.skipif(
        not (Path("/usr/sbin/haproxy").exists()), reason="haproxy is not installed (scripts/install_loadbalancer.sh)"
    ),
]

OLD = "version: '1.0.0'\nrate_limit: { limit: 100, window_seconds: 600, algorithm: sliding }\n"
NEW = "version: '1.1.0'\nrate_limit: { limit: 3, window_seconds: 600, algorithm: sliding }\n"


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
    applier = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "shell",
            "--no-imports",
            "-c",
            "import sys\n"
            "from django.core.management import call_command\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            f"call_command('policy_apply', '--tenant', '{slug}', '--file', '{policy}')\n"
            "print('\\napplied', flush=True)\n",
        ],
        cwd=BASE_DIR,
        env={**_clean_environ(), **deployment.service_env()},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert applier.stdout is not None and applier.stdin is not None
        assert applier.stdout.readline().strip() == "ready"
        began = time.monotonic()
        for base in (first, second):  # each process verifies the token, keeps the version and the rule
            assert _version(_search(base, token)) == "1.0.0"
        applier.stdin.write("go\n")
        applier.stdin.flush()
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
