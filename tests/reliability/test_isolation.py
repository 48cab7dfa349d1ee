"""Tenant isolation over every registered toolset: a Hypothesis state machine
makes random calls (valid-looking arguments from each tool's inputSchema, ids of
the caller's own and of other tenants' memories) as the member or admin of one
of three tenants, over MCP on every served dialect and over the HTTP surfaces
beside it (POST /api/<toolset>/<tool>, the roampal hooks, the langmem store,
the admin as a staff user); around every call, every tenant-scoped row of the
other two tenants is digested, and the answer is searched for their content
and ids."""

from __future__ import annotations

import random

import pytest

from tests.harness.generators.arguments import TENANT_SELECTORS, Generator, Pools
from tests.harness.isolation import IsolationRun, run_isolation_machine, selector_matrix
from tests.harness.rows import Digests, memory_ids_by_tenant
from tests.harness.surfaces.django_http import SELECTOR_SURFACES, SURFACES
from tests.harness.surfaces.in_process import toolset_names

pytestmark = pytest.mark.django_db(transaction=True)


def test_random_calls_across_three_tenants_leak_and_change_nothing_foreign(clients, people, surfaces):
    run = IsolationRun(
        clients, {who: (i, tenant) for who, (i, tenant, _) in people.items()}, strict=True, surfaces=surfaces
    )
    # CI size: 2 x 25 steps. `make reliability` runs 10,000.
    run_isolation_machine(run, examples=2, steps=25)
    report = run.report
    assert report.calls > 0 and set(report.per_toolset) <= {*toolset_names(), *SURFACES}
    assert report.leaks == [] and report.foreign_changes == []
    # The generated calls must reach past argument checks, or the test proves little.
    assert report.errors < report.calls


@pytest.mark.parametrize("selector", TENANT_SELECTORS)
@pytest.mark.parametrize("toolset", toolset_names())
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


def _foreign_pools(people, who: str) -> Pools:
    """Pools whose ids are all another tenant's (every id argument is foreign)."""
    index, tenant, _ = people[who]
    ids = memory_ids_by_tenant()
    foreign = sorted(i for t, found in ids.items() if t != tenant for i in found)
    return Pools(index, own_ids=[], foreign_ids=foreign)


@pytest.mark.parametrize("surface", SELECTOR_SURFACES)
def test_every_http_surface_refuses_tenant_selectors_and_changes_nothing(clients, people, surfaces, surface):
    digests = Digests()
    member = next(who for who in people if who.endswith("member"))
    other = next(tenant for _, tenant, _ in people.values() if tenant != people[member][1])
    rng = random.Random(15)
    before = digests.take()
    for selector in TENANT_SELECTORS:
        for _ in range(4):
            name, body, answer = surfaces.call(
                member, surface, rng, Generator(rng, Pools(0)), selector=(selector, other)
            )
            assert answer.outcome == "error", f"{name} accepted {selector}: {body}"
    assert digests.take() == before


def test_a_tenant_admin_in_the_admin_reaches_nothing_of_another_tenant(clients, people, surfaces):
    """Staff admins of tenant 0 and 1, every admin request (lists, searches for
    the others' secrets, detail pages, review actions, bulk actions, exports,
    dashboards) with only foreign memory ids: no foreign row changed, none shown."""
    from memory.services.memories import fact_store

    for who, (index, _, caller) in people.items():
        if who.endswith("admin"):
            fact_store(caller=caller, subject=f"secret{index}", predicate="is", content=f"code S3CR3T{index}K0")
    run = IsolationRun(clients, {who: (i, tenant) for who, (i, tenant, _) in people.items()}, strict=True)
    run.surfaces = surfaces
    rng = random.Random(15)
    for who in ("t0-admin", "t1-admin", "t2-member"):
        for _ in range(12):
            gen = Generator(rng, _foreign_pools(people, who), foreign_id_rate=1.0)
            before = run.digests.take()
            name, sent, answer = surfaces.call(who, "admin", rng, gen)
            run._check(who, name, sent, answer, before, run.digests.take())
    assert run.report.leaks == [] and run.report.foreign_changes == []
