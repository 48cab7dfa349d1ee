"""Operators' tools through their management commands: JSONL export/import
round-trips every field and event; purge of a tenant or a principal is
complete, audited, and the only way around the append-only audit log."""

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, transaction

from memory.consolidators import get_consolidator
from memory.models import ConflictCandidate, Memory, MemoryEvent, MemoryLink
from memory.services.conflicts import memory_conflict_check
from memory.services.consolidation import episodes_consolidate
from memory.services.feedback import memory_feedback
from memory.services.memories import episode_store, fact_store, memory_forget, rule_store
from policy.models import ApiToken, Principal
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


def populate(identity):
    caller = identity.caller
    fact_store(caller=caller, subject="user", predicate="city", content="User lives in Berlin", tags=["home"])
    fact_store(caller=caller, subject="user", predicate="city", content="User lives in Hamburg", namespace=["ana"])
    moved = fact_store(caller=caller, subject="user", predicate="city", content="User lives in Paris").memory
    contradiction = fact_store(caller=caller, subject="user", predicate="home town", content="User lives in Munich")
    memory_conflict_check(memory_id=contradiction.memory.id)
    rule = rule_store(caller=caller, content="Answer in German", metadata={"why": "user asked"})
    memory_feedback(caller=caller, memory_id=rule.id, signal="harmful", reason="user switched to English")
    for text in ["User prefers dark mode in the editor", "The user likes dark mode for the editor"] * 2:
        episode_store(caller=caller, content=text, butler="assistant", session_id="s-1")
    episodes_consolidate(tenant_id=caller.tenant_id, consolidator=get_consolidator("offline"))
    memory_forget(caller=caller, kind="fact", memory_id=moved.id)


def export(slug):
    out = io.StringIO()
    call_command("export", tenant=slug, output="-", stdout=out, stderr=io.StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def without_event_ids(rows, skip_types=()):
    return [
        {k: v for k, v in row.items() if not (row["type"] == "event" and k == "id")}
        for row in rows
        if not (row["type"] == "event" and row["event_type"] in skip_types)
    ]


# The purge command reconnects as the database owner: no test transaction may span it.
@pytest.mark.django_db(transaction=True)
def test_export_purge_import_round_trips_everything(tmp_path):
    owner = make_identity("tenant-a", "owner", role="admin")
    populate(owner)
    outsider = make_identity("tenant-b", "outsider")
    fact_store(caller=outsider.caller, subject="x", predicate="y", content="Tenant B keeps this")

    before = export("tenant-a")
    kinds = {row["type"] for row in before}
    assert kinds == {"header", "principal", "memory", "link", "conflict", "event"}
    memory_row = next(r for r in before if r["type"] == "memory" and r["kind"] == "fact")
    assert len(memory_row["embedding"]) == 384 and "search_vector" not in memory_row
    assert not any(r.get("tenant_id") == str(outsider.caller.tenant_id) for r in before)

    path = tmp_path / "tenant-a.jsonl"
    call_command("export", tenant="tenant-a", output=str(path), stderr=io.StringIO())
    call_command("purge", tenant="tenant-a", reason="ticket 42", yes=True, stdout=io.StringIO())
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()
    assert list(MemoryEvent.objects.filter(tenant_id=owner.caller.tenant_id).values_list("event_type", flat=True)) == [
        "tenant_purged"
    ]
    assert Memory.objects.filter(tenant_id=outsider.caller.tenant_id).count() == 1

    call_command("import", tenant="tenant-a", input=str(path), stdout=io.StringIO())
    after = export("tenant-a")
    # Same rows, same fields, same events in the same order; only event ids are new.
    assert without_event_ids(after, skip_types={"tenant_purged"}) == without_event_ids(before)


def test_import_refuses_a_file_that_is_not_an_export(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "memory"}\n')
    with pytest.raises(CommandError, match="nothing was imported"):
        call_command("import", tenant="tenant-z", input=str(path))
    assert not Memory.objects.exists()


@pytest.mark.django_db(transaction=True)  # the purge reconnects as the owner
def test_purge_one_principal(tmp_path):
    owner = make_identity("tenant-a", "owner", role="admin")
    member = make_identity("tenant-a", "member")
    kept = fact_store(caller=owner.caller, subject="team", predicate="lead", content="Ana leads the team").memory
    gone = fact_store(caller=member.caller, subject="me", predicate="diagnosis", content="I have asthma").memory
    episode_store(caller=member.caller, content="Talked about my asthma", butler="health")
    # The owner acts on the member's memory: that event is about the member's data, so it goes too.
    memory_forget(caller=owner.caller, kind="fact", memory_id=gone.id)

    with pytest.raises(CommandError, match="--yes"):
        call_command("purge", tenant="tenant-a", principal="member")
    out = io.StringIO()
    call_command("purge", tenant="tenant-a", principal="member", yes=True, stdout=out)
    assert "2 memories" in out.getvalue()

    assert member.caller.principal_id is not None
    assert list(Memory.objects.values_list("id", flat=True)) == [kept.id]
    assert not MemoryEvent.objects.filter(memory_id=gone.id).exists()
    assert not MemoryEvent.objects.filter(actor_principal_id=member.caller.principal_id).exists()
    assert MemoryEvent.objects.filter(memory_id=kept.id, event_type="stored").exists()
    assert not Principal.objects.filter(pk=member.caller.principal_id).exists()
    assert not ApiToken.objects.filter(principal_id=member.caller.principal_id).exists()
    [audit] = MemoryEvent.objects.filter(event_type="principal_purged")
    assert audit.payload["principal_id"] == str(member.caller.principal_id) and audit.payload["memories"] == 2


def test_audit_log_stays_append_only_outside_a_purge():
    owner = make_identity("tenant-a", "owner", role="admin")
    fact_store(caller=owner.caller, subject="a", predicate="b", content="c")
    with pytest.raises(DatabaseError), transaction.atomic():
        MemoryEvent.objects.all().delete()
    assert MemoryEvent.objects.exists()


def test_operator_sweep_commands_run():
    owner = make_identity("tenant-a", "owner", role="admin")
    for text in ["User prefers dark mode in the editor", "The user likes dark mode for the editor"] * 2:
        episode_store(caller=owner.caller, content=text, butler="assistant")
    out = io.StringIO()
    commands: list[tuple[str, dict[str, Any]]] = [
        ("consolidate", {"consolidator": "offline"}),
        ("expire", {}),
        ("decay", {}),
        ("reembed", {"all": True, "tenant": "tenant-a"}),
    ]
    for command, args in commands:
        call_command(command, stdout=out, stderr=out, **args)
    text = out.getvalue()
    assert "4 episodes consolidated, 1 facts/rules created" in text
    assert "deleted 0 expired memories" in text
    assert "0 fact state changes recorded, 0 rule maturities changed" in text
    assert "5 memories re-embedded" in text
    assert MemoryLink.objects.count() == 4 and ConflictCandidate.objects.count() == 0


def test_import_over_existing_rows_imports_nothing(tmp_path):
    owner = make_identity("tenant-a", "owner", role="admin")
    fact_store(caller=owner.caller, subject="a", predicate="b", content="c")
    path = tmp_path / "a.jsonl"
    call_command("export", tenant="tenant-a", output=str(path), stderr=io.StringIO())
    with pytest.raises(CommandError, match="nothing was imported"):
        call_command("import", tenant="tenant-copy", input=str(path))  # same memory ids already exist
    assert Memory.objects.count() == 1
    assert not Principal.objects.filter(tenant__slug="tenant-copy").exists()


@pytest.mark.django_db(transaction=True)  # the purge reconnects as the owner
def test_import_maps_legacy_forgotten_to_retracted(tmp_path):
    owner = make_identity("tenant-a", "owner", role="admin")
    fact = fact_store(caller=owner.caller, subject="user", predicate="pet", content="User has a cat").memory
    rows = export("tenant-a")
    call_command("purge", tenant="tenant-a", reason="re-import", yes=True, stdout=io.StringIO())
    for row in rows:
        if row["type"] == "memory":
            row["validity"] = "forgotten"  # written by an older system
    path = tmp_path / "legacy.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    call_command("import", tenant="tenant-a", input=str(path), stdout=io.StringIO())
    assert Memory.objects.get(pk=fact.id).validity == "retracted"
