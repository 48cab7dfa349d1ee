"""The reliability suite's report: for each part, the tables it prints and the
checks it failed (bench/reliability.py exits 1 when there is any)."""

from __future__ import annotations

from collections.abc import Sequence

from tests.harness.faults import EMBEDDER_FAULTS, FaultReport
from tests.harness.fuzzing import FuzzReport
from tests.harness.isolation import IsolationReport
from tests.harness.load.contention import ContentionReport
from tests.harness.load.mixed import LoadReport
from tests.harness.reports.tables import titled_table

# The classes of a fuzzed call's answer, in the table's order; all but the first two fail the suite.
FUZZ_KINDS = [
    "ok",
    "coded error",
    "uncoded error",
    "internal detail",
    "internal error",
    "crash",
    "hang",
    "protocol exception",
]


def isolation(r: IsolationReport, elapsed: float) -> tuple[str, list[str]]:
    lines = [
        titled_table(
            "Isolation (Hypothesis state machine, 3 tenants x member/admin, every toolset over MCP, "
            "REST route, roampal hooks, langmem store, admin)",
            ["calls", "selector calls", "error answers", "leaks", "foreign rows changed", "selectors accepted", "s"],
            [
                [
                    r.calls,
                    r.selector_calls,
                    r.errors,
                    len(r.leaks),
                    len(r.foreign_changes),
                    len(r.selectors_accepted),
                    elapsed,
                ]
            ],
        ),
        titled_table("Isolation calls per endpoint", ["endpoint", "calls"], sorted(r.per_toolset.items())),
    ]
    lines += [f"  e.g. {line[:300]}" for line in (r.leaks + r.foreign_changes + r.selectors_accepted)[:8]]
    failures = []
    if r.leaks:
        failures.append(f"isolation: {len(r.leaks)} leaks")
    if r.foreign_changes:
        failures.append(f"isolation: {len(r.foreign_changes)} calls changed another tenant's rows")
    if r.selectors_accepted:
        failures.append(f"isolation: {len(r.selectors_accepted)} tenant selectors accepted")
    return "\n".join(lines), failures


def fuzz(
    report: FuzzReport, toolsets: Sequence[str], elapsed: float, problems: dict[str, int]
) -> tuple[str, list[str]]:
    """``problems``: the database consistency checks after fuzzing (rows.consistency_problems)."""
    kinds = FUZZ_KINDS
    rows = [[ts, report.calls[ts], *(report.count(k, ts) for k in kinds)] for ts in toolsets]
    lines = [titled_table(f"Fuzzing ({elapsed:.0f} s)", ["toolset", "calls", *kinds], rows)]
    for (ts, kind), samples in sorted(report.samples.items()):
        if kind in {"ok", "coded error"}:
            continue
        for sample in samples[:2]:
            lines.append(f"  {ts} {kind}: {sample[:240]!r}")
    lines.append(titled_table("Database consistency after fuzzing", ["check", "rows"], list(problems.items())))
    failures = [f"fuzz: {report.count(k)} {k}" for k in kinds[2:] if report.count(k)]
    failures += [f"consistency: {n} {label}" for label, n in problems.items() if n]
    return "\n".join(lines), failures


def faults(reports: Sequence[FaultReport]) -> tuple[str, list[str]]:
    header = [
        "fault",
        "writes",
        "attempts",
        "accepted",
        "error answers",
        "no answer",
        "uncoded",
        "bare HTTP 5xx",
        "lost",
        "search failed",
        "committed but error",
        "duplicates",
        "committed, no answer",
        "follow-ups pending",
        "worker back",
        "recovery s",
    ]
    rows = [
        [
            r.fault,
            r.writes,
            r.attempts,
            r.accepted,
            r.error_answers,
            r.no_answer,
            r.uncoded_errors,
            r.bare_http_errors,
            r.lost,
            r.unsearchable,
            r.committed_but_error,
            r.duplicates,
            r.committed_unanswered,
            r.follow_ups_pending,
            "yes" if r.worker_back else "NO",
            r.recovered_in,
        ]  # fmt: skip
        for r in reports
    ]
    lines = [
        titled_table("Faults under a write load (memory toolset over HTTP, client retries up to 3x)", header, rows)
    ]
    embedder = [r for r in reports if r.fault in EMBEDDER_FAULTS]
    if embedder:
        lines.append(
            titled_table(
                "Embedder faults: writes embedded later, searches while the fault was on (keyword fallback)",
                ["fault", "writes embedded later", "searches", "errors", "found by keyword", "p95 ms", "max ms"],
                [
                    [
                        r.fault,
                        r.embedded_later,
                        r.fault_reads,
                        r.fault_read_errors,
                        r.fault_reads_found,
                        r.fault_read_p95_ms,
                        r.fault_read_max_ms,
                    ]  # fmt: skip
                    for r in embedder
                ],
            )
        )
    for r in reports:
        for sample in r.samples[:2]:
            lines.append(f"  {r.fault}: {sample}")
    failures = []
    for r in embedder:
        if r.fault_read_errors:
            failures.append(f"faults/{r.fault}: {r.fault_read_errors} searches answered an error")
        if not r.fault_reads:
            failures.append(f"faults/{r.fault}: no search ran while the fault was on")
    for r in reports:
        for label, n in (
            ("lost writes", r.lost),
            ("writes whose search failed", r.unsearchable),
            ("error answers for committed writes", r.committed_but_error),
            ("duplicated writes", r.duplicates),
            ("follow-ups not done", r.follow_ups_pending),
            ("bare HTTP errors", r.bare_http_errors),
            ("error answers without a code", r.uncoded_errors),
            ("worker not running after recovery", int(not r.worker_back)),
        ):
            if n:
                failures.append(f"faults/{r.fault}: {n} {label}")
    return "\n".join(lines), failures


def load(r: LoadReport) -> tuple[str, list[str]]:
    lines = [
        titled_table(
            "Load (HTTP MCP clients, 50% store / 50% search)",
            ["clients", "seconds", "calls", "calls/s", "errors", "p50 ms", "p95 ms", "web RSS MiB start", "end"],
            [
                [
                    r.clients,
                    r.seconds,
                    r.calls,
                    r.per_second,
                    r.errors,
                    r.p50_ms,
                    r.p95_ms,
                    r.rss_start_mib,
                    r.rss_end_mib,
                ]
            ],
        )
    ]
    lines += [f"  e.g. {sample}" for sample in r.samples[:3]]
    return "\n".join(lines), [f"load: {r.errors} errors"] if r.errors else []


def contention(r: ContentionReport) -> tuple[str, list[str]]:
    lines = [
        titled_table(
            "Contention (one tenant, MCP HTTP writers, worker conflict checks, every beat sweep each minute; "
            "lost = acknowledged, not found by a search for its own text, retired by no audited rule)",
            [
                "writers",
                "s",
                "writes",
                "accepted",
                "error answers",
                "reads",
                "read errors",
                "deadlocks",
                "merged (same statement)",
                "open candidates",
                "replaced by key",
                "lost",
                "search failed",
                "follow-ups pending",
            ],
            [
                [
                    r.writers,
                    r.seconds,
                    r.writes,
                    r.accepted,
                    r.error_answers,
                    r.reads,
                    r.read_errors,
                    r.deadlocks,
                    r.merged,
                    r.open_candidates,
                    r.replaced_by_key,
                    r.lost,
                    r.unsearchable,
                    r.follow_ups_pending,
                ]
            ],
        )
    ]
    lines += [f"  e.g. {sample}" for sample in r.samples[:4]]
    return "\n".join(lines), [] if r.passed else [f"contention: {r}"]


def summary(failures: Sequence[str]) -> str:
    return titled_table("Summary", ["check", "result"], [[f, "FAIL"] for f in failures] or [["all checks", "pass"]])
