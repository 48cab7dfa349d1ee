"""Tenant isolation over every registered toolset: a Hypothesis state machine
makes random calls (valid-looking arguments from each tool's inputSchema, ids of
the caller's own and of other tenants' memories) as the member or admin of one
of three tenants; around every call, every tenant-scoped row of the other two
tenants is digested, and the answer is searched for their content and ids."""

from __future__ import annotations

import pytest

from bench.reliability import TENANT_SELECTORS, Digests, IsolationRun, run_isolation_machine, selector_matrix
from mcp_server.toolsets import TOOLSETS

pytestmark = pytest.mark.django_db(transaction=True)


def test_random_calls_across_three_tenants_leak_and_change_nothing_foreign(clients, people):
    run = IsolationRun(clients, {who: (i, tenant) for who, (i, tenant, _) in people.items()}, strict=True)
    # CI size: 2 x 20 steps. `make reliability` runs 10,000.
    run_isolation_machine(run, examples=2, steps=20)
    report = run.report
    assert report.calls > 0 and set(report.per_toolset) <= set(TOOLSETS)
    assert report.leaks == [] and report.foreign_changes == []
    # The generated calls must reach past argument checks, or the test proves little.
    assert report.errors < report.calls


@pytest.mark.parametrize("selector", TENANT_SELECTORS)
@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
def test_every_tenant_selector_is_refused_and_changes_nothing(clients, people, toolset, selector):
    digests = Digests()
    member = next(who for who in people if who.endswith("member"))
    other = next(tenant for _, tenant, _ in people.values() if tenant != people[member][1])
    before = digests.take()
    answers = selector_matrix(clients, member, other, toolsets=[toolset], selectors=[selector])
    assert answers
    accepted = [name for _, name, _, answer in answers if answer.outcome == "ok"]
    assert accepted == [], f"{selector} accepted by {accepted}"
    assert digests.take() == before
