"""The reader of memproj's own export keeps a memory's outcome and alias rows
until it reads the memory, and they come after every memory row in the
export's order. Every one of them is bounded before it is kept: an id no
longer than an alias holds, a signal memproj knows, a system name the alias
column takes; the rest is skipped with its reason. They are kept on disk, not
in memory: a file of millions of them (an export's lines are not counted)
leaves the reader's memory where it was.

Found by probing: the reader held every outcome and alias row of the file in
memory before it imported anything, any text as a memory_id (up to 8 MB
each), so a file of short alias lines (from the command line, without the
admin upload's 64 MB cap) grew the process without limit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from memory.importers.memproj import ALIASES_PER_MEMORY, OUTCOMES_PER_MEMORY
from memory.models import Memory, MemoryAlias, MemoryEvent
from memory.services.imports import memories_import
from tests.conftest import make_identity

HEADER = {"type": "header", "format": "memproj-export/1", "tenant": "{}"}
MEMORY = {"type": "memory", "id": "m-0", "kind": "fact", "content": "the walrus keeps its history"}
ALIAS_LINES = 600_000
HUGE_IDS = 10
HUGE_ID_CHARS = 1024 * 1024
GROWTH_MAX_MB = 48

READ = textwrap.dedent(
    """
    import json, sys
    from collections import Counter
    from pathlib import Path
    from memory.importers.base import ImportedMemory, Skipped
    from memory.importers.memproj import MemprojExport

    def status_mb(key):
        # This process's own figures (getrusage's ru_maxrss starts at the parent's, pytest's, peak).
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024

    source = MemprojExport(Path(sys.argv[1]))
    before = status_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
    skipped, memories = Counter(), {}
    for record in source.records():
        if isinstance(record, Skipped):
            skipped[record.reason] += 1
            assert len(record.source_id) < 100
        elif isinstance(record, ImportedMemory):
            memories[record.source_id] = [list(record.other_aliases), [s for s, _ in record.outcomes]]
    source.close()
    growth = status_mb("VmHWM") - before
    print(json.dumps({"before_mb": before, "growth_mb": growth, "skipped": skipped, "memories": memories}))
    """
)


def test_millions_of_alias_rows_and_huge_ids_leave_the_readers_memory_bounded(tmp_path):
    path = tmp_path / "hostile.jsonl"
    with path.open("w") as out:
        out.write(json.dumps(HEADER) + "\n" + json.dumps(MEMORY) + "\n")
        out.write(json.dumps({"type": "alias", "memory_id": "m-0", "system": "mem0", "alias": "kept"}) + "\n")
        out.write(json.dumps({"type": "event", "memory_id": "m-0", "event_type": "marked_worked"}) + "\n")
        out.write(json.dumps({"type": "event", "memory_id": "m-0", "event_type": "marked_exploded"}) + "\n")
        for start in range(0, ALIAS_LINES, 10_000):
            out.write(
                "".join(
                    f'{{"type":"alias","memory_id":"x{i:09d}","system":"s","alias":"a{i:09d}"}}\n'
                    for i in range(start, start + 10_000)
                )
            )
        for i in range(HUGE_IDS):
            huge = str(i) * HUGE_ID_CHARS
            out.write(json.dumps({"type": "alias", "memory_id": huge, "system": "s", "alias": "a"}) + "\n")
        out.write(json.dumps({"type": "alias", "memory_id": "m-0", "system": "s" * 33, "alias": "a"}) + "\n")
    done = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Measured: some 13 MB (a 1 MB line read, the scratch store's cache); the old reader, holding every row, 230 MB.
    assert result["growth_mb"] < GROWTH_MAX_MB, result["growth_mb"]
    assert result["memories"] == {"m-0": [[["mem0", "kept"]], ["worked"]]}
    alias_reason = next(reason for reason in result["skipped"] if reason.startswith("an alias row whose memory_id"))
    assert "at most 300 characters" in alias_reason and "at most 32" in alias_reason
    assert result["skipped"][alias_reason] == HUGE_IDS + 1
    (outcome_reason,) = (reason for reason in result["skipped"] if reason.startswith("an outcome event"))
    assert "none of worked, partial, failed" in outcome_reason and result["skipped"][outcome_reason] == 1


def export_file(tmp_path, rows):
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [HEADER, *rows]))
    return str(path)


@pytest.mark.django_db
def test_one_memory_brings_its_latest_outcomes_and_first_aliases_saying_what_it_left(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    rows = [MEMORY]
    rows += [
        {
            "type": "event",
            "memory_id": "m-0",
            "event_type": "marked_failed" if i < 5 else "marked_worked",
            "created_at": f"2024-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
        }
        for i in range(OUTCOMES_PER_MEMORY + 5)
    ]
    rows += [
        {"type": "alias", "memory_id": "m-0", "system": "mem0", "alias": f"mem0-{i}"}
        for i in range(ALIASES_PER_MEMORY + 3)
    ]
    report = memories_import(caller=caller, system="memproj", location=export_file(tmp_path, rows), embed=False)
    assert report.created_total == 1
    (memory,) = Memory.objects.filter(tenant_id=caller.tenant_id)
    marked = MemoryEvent.objects.filter(memory_id=memory.pk, event_type__startswith="marked_")
    # The latest ones: the five failures came first.
    assert marked.count() == OUTCOMES_PER_MEMORY
    assert not marked.filter(event_type="marked_failed").exists()
    aliases = set(MemoryAlias.objects.filter(memory_id=memory.pk, system="mem0").values_list("alias", flat=True))
    assert aliases == {f"mem0-{i}" for i in range(ALIASES_PER_MEMORY)}
    assert report.noted == {
        f"an outcome history of more than {OUTCOMES_PER_MEMORY} events: its latest {OUTCOMES_PER_MEMORY} "
        "were kept (the counters and scores are whole)": 1,
        f"more than {ALIASES_PER_MEMORY} aliases: the first {ALIASES_PER_MEMORY} were kept": 1,
    }
    assert "changed 1: more than 100 aliases" in "\n".join(report.lines())


@pytest.mark.django_db
def test_an_alias_whose_system_is_longer_than_its_column_is_skipped_not_the_memory(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    rows = [
        MEMORY,
        {"type": "alias", "memory_id": "m-0", "system": "s" * 33, "alias": "a"},
        {"type": "alias", "memory_id": "m-0", "system": "mem0", "alias": "b"},
    ]
    report = memories_import(caller=caller, system="memproj", location=export_file(tmp_path, rows), embed=False)
    assert report.created_total == 1, report.lines()
    (memory,) = Memory.objects.filter(tenant_id=caller.tenant_id)
    assert set(MemoryAlias.objects.filter(memory_id=memory.pk).values_list("system", "alias")) == {
        ("memproj", "m-0"),
        ("mem0", "b"),
    }
    assert sum(n for reason, n in report.skipped.items() if reason.startswith("an alias row whose")) == 1


@pytest.mark.django_db
def test_a_memory_row_whose_id_is_longer_than_an_alias_is_skipped_saying_where(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    rows = [{**MEMORY, "id": "x" * 301}, {**MEMORY, "id": "m-1"}]
    report = memories_import(caller=caller, system="memproj", location=export_file(tmp_path, rows), embed=False)
    assert report.created_total == 1
    reason = "a memory row whose id is not an id memproj keeps (text of at most 300 characters)"
    assert report.skipped == {reason: 1} and report.examples[reason] == ["line 2"]
