"""Tenant isolation: a Hypothesis state machine of random calls over every
served toolset and the HTTP surfaces beside MCP, each call checked against a
digest of the other tenants' rows and its answer searched for their content."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.harness.generators.arguments import SECRET_RE, TENANT_SELECTORS, UUID_RE, Generator, Pools
from tests.harness.rows import Digests, memory_ids_by_tenant
from tests.harness.surfaces.answers import Answer, answer_text
from tests.harness.surfaces.django_http import SELECTOR_SURFACES, SURFACES, HttpSurfaces
from tests.harness.surfaces.in_process import InProcessClients


@dataclass
class IsolationReport:
    calls: int = 0
    errors: int = 0
    leaks: list[str] = field(default_factory=list)
    foreign_changes: list[str] = field(default_factory=list)
    selector_calls: int = 0
    selectors_accepted: list[str] = field(default_factory=list)
    per_toolset: Counter[str] = field(default_factory=Counter)


class IsolationRun:
    """The checks behind the state machine: before and after each call, a digest
    of every tenant-scoped row of the tenants other than the caller's; after it,
    the answer searched for their secrets and ids. ``strict`` raises on the
    first leak or foreign change (Hypothesis then reports the call sequence)."""

    def __init__(
        self,
        clients: InProcessClients,
        identities: dict[str, tuple[int, str]],
        *,
        strict: bool,
        surfaces: HttpSurfaces | None = None,
    ) -> None:
        # identities: who -> (tenant index, tenant id)
        self.clients = clients
        self.surfaces = surfaces
        # Every served dialect over MCP, and the HTTP surfaces beside it, equally likely.
        self.endpoints = [*clients.toolsets, *(SURFACES if surfaces is not None else ())]
        self.identities = identities
        self.strict = strict
        self.digests = Digests()
        self.report = IsolationReport()
        self.pools = {who: Pools(index) for who, (index, _) in identities.items()}
        self.ids = memory_ids_by_tenant()
        self.tenant_index = {tenant: index for index, tenant in identities.values()}

    def _refresh_pools(self) -> None:
        kinds: dict[str, str] = {}
        self.ids = memory_ids_by_tenant(kinds)
        for who, (_, tenant) in self.identities.items():
            pools = self.pools[who]
            pools.kinds = kinds
            pools.own_ids = sorted(self.ids.get(tenant, ()))[-200:]
            pools.foreign_ids = sorted(i for t, ids in self.ids.items() if t != tenant for i in ids)[-200:]

    def _others(self, snapshot: dict[tuple[str, str], tuple[int, str]], tenant: str) -> dict[Any, Any]:
        return {k: v for k, v in snapshot.items() if k[1] != tenant}

    def _fail(self, bucket: list[str], message: str) -> None:
        bucket.append(message)
        if self.strict:
            raise AssertionError(message)

    def random_call(self, rng: random.Random, *, foreign_ids: bool = False) -> None:
        who = rng.choice(sorted(self.identities))
        endpoint = rng.choice(self.endpoints)
        if self.report.calls % 10 == 0:
            self._refresh_pools()
        gen = Generator(rng, self.pools[who], foreign_id_rate=0.9 if foreign_ids else 0.25)
        before = self.digests.take()
        if endpoint in SURFACES:
            assert self.surfaces is not None
            name, args, answer = self.surfaces.call(who, endpoint, rng, gen)
        else:
            tool = rng.choice(self.clients.tools[endpoint])
            name, args = f"{endpoint}.{tool.name}", gen.arguments(tool.schema)
            answer = self.clients.call(who, endpoint, tool.name, args)
        after = self.digests.take()
        self.report.calls += 1
        self.report.per_toolset[endpoint] += 1
        self.report.errors += answer.outcome != "ok"
        self._check(who, f"{endpoint}: {name}", args, answer, before, after)

    def _check(
        self,
        who: str,
        name: str,
        args: Any,
        answer: Answer,
        before: dict[tuple[str, str], tuple[int, str]],
        after: dict[tuple[str, str], tuple[int, str]],
    ) -> None:
        """The answer holds nothing of another tenant (content, memory ids, for
        the admin its slug) and no other tenant's rows changed."""
        _, tenant = self.identities[who]
        sent = json.dumps(args, default=str)
        text = answer_text(answer)
        label = f"{who} {name}({sent[:300]})"
        index = self.identities[who][0]
        for found in SECRET_RE.finditer(text):
            if int(found.group(1)) != index and found.group(0) not in sent:
                self._fail(self.report.leaks, f"{label} -> another tenant's content {found.group(0)}")
        for found in set(UUID_RE.findall(text)) - set(UUID_RE.findall(sent)):
            owner = next((t for t, ids in self.ids.items() if found in ids), None)
            if owner is not None and owner != tenant:
                self._fail(self.report.leaks, f"{label} -> another tenant's memory id {found}")
        if self.surfaces is not None and name.startswith("admin"):
            for slug in self.surfaces.foreign_slugs(who):
                if slug in text and slug not in sent:
                    self._fail(self.report.leaks, f"{label} -> another tenant's slug {slug}")
        changed = {
            k
            for k in set(self._others(before, tenant)) | set(self._others(after, tenant))
            if before.get(k) != after.get(k)
        }
        if changed:
            self._fail(self.report.foreign_changes, f"{label} changed {sorted(changed)}")

    def selector_call(self, rng: random.Random) -> None:
        """A tenant selector naming another tenant must be refused and change nothing."""
        who = rng.choice(sorted(self.identities))
        _, tenant = self.identities[who]
        others = sorted({t for _, t in self.identities.values()} - {tenant})
        endpoint = rng.choice([e for e in self.endpoints if e not in SURFACES or e in SELECTOR_SURFACES])
        selector = rng.choice(TENANT_SELECTORS)
        target = rng.choice(others)
        gen = Generator(rng, self.pools[who])
        before = self.digests.take()
        if endpoint in SURFACES:
            assert self.surfaces is not None
            name, args, answer = self.surfaces.call(who, endpoint, rng, gen, selector=(selector, target))
        else:
            tool = rng.choice(self.clients.tools[endpoint])
            args = gen.arguments(tool.schema)
            args[selector] = target
            if rng.random() < 0.5:
                args["elevate"] = True
            name = f"{endpoint}.{tool.name}"
            answer = self.clients.call(who, endpoint, tool.name, args)
        after = self.digests.take()
        self.report.selector_calls += 1
        self.report.per_toolset[endpoint] += 1
        label = f"{who} {name}({json.dumps(args, default=str)[:300]}) with {selector}"
        if answer.outcome == "ok":
            # Accepted (the argument contract is missing): it acted on the
            # caller's own tenant, whose rows it may change; never a foreign one.
            self.report.selectors_accepted.append(label)
            before, after = self._others(before, tenant), self._others(after, tenant)
        if before != after:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            self._fail(self.report.foreign_changes, f"{label} ({answer.outcome}) changed {changed}")


def make_isolation_machine(run: IsolationRun) -> type:
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, rule

    class IsolationMachine(RuleBasedStateMachine):
        # One rule with a weighted choice rather than three rules: Hypothesis'
        # swarm testing switches whole rules off per example, which at CI sizes
        # can leave a kind of call out entirely.
        # A true Random seeded by Hypothesis: what the generator draws depends on
        # the database (known ids), which Hypothesis' own choice sequence forbids.
        @rule(
            kind=st.sampled_from(["call"] * 6 + ["foreign ids"] * 3 + ["tenant selector"]),
            rng=st.randoms(use_true_random=True),
        )
        def step(self, kind: str, rng: random.Random) -> None:
            if kind == "tenant selector":
                run.selector_call(rng)
            else:
                run.random_call(rng, foreign_ids=kind == "foreign ids")

    return IsolationMachine


def run_isolation_machine(run: IsolationRun, *, examples: int, steps: int, seed: int | None = None) -> None:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    machine = make_isolation_machine(run)
    options = settings(
        # No shrinking: each step depends on the database the earlier ones left,
        # so a shrunk sequence replays differently; the failing one is printed whole.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=seed is not None,
        suppress_health_check=list(HealthCheck),
    )
    run_state_machine_as_test(machine, settings=options)


def selector_matrix(
    clients: InProcessClients,
    who: str,
    other_tenant: str,
    *,
    toolsets: Sequence[str] | None = None,
    selectors: Sequence[str] = TENANT_SELECTORS,
) -> list[tuple[str, str, str, Answer]]:
    """Every tool (of every toolset) with every tenant selector naming another tenant."""
    out = []
    rng = random.Random(15)
    for toolset in toolsets or clients.toolsets:
        for tool in clients.tools[toolset]:
            for selector in selectors:
                args = Generator(rng, Pools(0)).arguments(tool.schema, optional_rate=0.0)
                args[selector] = other_tenant
                out.append((toolset, tool.name, selector, clients.call(who, toolset, tool.name, args)))
    return out
