"""Fuzzing every tool of every served toolset: calls of each mutation class,
each answer classified (ok, coded error, uncoded error, internal detail, crash,
hang, protocol exception)."""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from tests.harness.generators.arguments import MUTATIONS, NOT_GENERATED, Generator, Pools, mutate, resolve_refs
from tests.harness.rows import memory_ids_by_tenant
from tests.harness.surfaces.answers import TOOL_PREFIX, Answer
from tests.harness.surfaces.in_process import InProcessClients


def json_strings_in_optional_text(clients: InProcessClients, who: str) -> list[tuple[str, str, str, Answer]]:
    """Every optional string parameter of every tool given text that happens to
    be JSON (an object, an array): it is text like any other and must be
    accepted or refused with a clear code, never crash the call."""
    out = []
    rng = random.Random(15)
    for toolset in clients.toolsets:
        for tool in clients.tools[toolset]:
            required = set(tool.schema.get("required", []))
            base = Generator(rng, Pools(0)).arguments(tool.schema, optional_rate=0.0)
            for name, prop in tool.schema.get("properties", {}).items():
                prop = resolve_refs(prop, tool.schema)
                types = {o.get("type") for o in prop.get("anyOf", [prop])}
                if name in required or name in NOT_GENERATED or "string" not in types or "enum" in prop:
                    continue
                for text in ('{"note": "json text"}', '["a", "b"]'):
                    answer = clients.call(who, toolset, tool.name, {**base, name: text})
                    out.append((toolset, tool.name, name, answer))
    return out


INTERNAL_CODES = {"INTERNAL", "INTERNAL_ERROR", "-32603"}


@dataclass
class FuzzReport:
    calls: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    samples: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, toolset: str, kind: str, sample: str) -> None:
        self.outcomes[(toolset, kind)] += 1
        if len(self.samples[(toolset, kind)]) < 5:
            self.samples[(toolset, kind)].append(sample[:400])

    def count(self, kind: str, toolset: str | None = None) -> int:
        return sum(n for (t, k), n in self.outcomes.items() if k == kind and (toolset is None or t == toolset))


def fuzz(
    clients: InProcessClients, who: str, *, calls_per_toolset: int, seed: int = 15, timeout: float = 30
) -> FuzzReport:
    """Calls of every mutation class on every tool; each answer is classified:
    ok, coded error, uncoded error, internal detail (a traceback or validation
    dump), a crash (the SDK's bare 'Error executing tool'), a hang, or a
    protocol exception."""
    report = FuzzReport()
    rng = random.Random(seed)
    pools = Pools(0)
    for toolset in clients.toolsets:
        tools = clients.tools[toolset]
        for i in range(calls_per_toolset):
            if i % 25 == 0:
                ids = memory_ids_by_tenant(pools.kinds)
                pools.own_ids = sorted(itertools.chain.from_iterable(ids.values()))[-100:]
            tool = tools[i % len(tools)] if i < len(tools) * 2 else rng.choice(tools)
            mutation = MUTATIONS[i % len(MUTATIONS)] if i < len(MUTATIONS) * len(tools) else rng.choice(MUTATIONS)
            name, args, detail = mutate(rng, tool, Generator(rng, pools), mutation)
            answer = clients.call(who, toolset, name, args, timeout=timeout)
            report.calls[toolset] += 1
            sample = f"{mutation} {name} {detail!r}: {answer.text[:300]}"
            if answer.outcome == "ok":
                report.add(toolset, "ok", sample)
            elif answer.outcome == "hang":
                report.add(toolset, "hang", sample)
            elif answer.internal_detail:
                report.add(toolset, "internal detail", sample)
            elif answer.outcome == "exception":
                report.add(toolset, "protocol exception", sample)
            elif TOOL_PREFIX.sub("", answer.text.strip()).strip() == "":
                report.add(toolset, "crash", sample)
            elif answer.code is None:
                report.add(toolset, "uncoded error", sample)
            elif answer.code.upper() in INTERNAL_CODES or answer.core_code == "INTERNAL":
                # Coded, but the call crashed: input the schema let through broke a tool.
                report.add(toolset, "internal error", sample)
            else:
                report.add(toolset, "coded error", sample)
    return report
