import pytest
from django.db import DatabaseError, connection, transaction

from memory.models import MemoryEvent
from memory.services.memories import episode_store

pytestmark = pytest.mark.django_db(transaction=True)


def test_memory_events_are_append_only_in_the_database(member):
    episode_store(caller=member.caller, content="something happened", butler="general")
    event = MemoryEvent.objects.get(event_type="stored")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        MemoryEvent.objects.filter(pk=event.pk).update(event_type="tampered")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        MemoryEvent.objects.filter(pk=event.pk).delete()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM memory_memoryevent")
    assert MemoryEvent.objects.get(pk=event.pk).event_type == "stored"


def test_purge_guard_is_scoped_to_one_transaction(member):
    episode_store(caller=member.caller, content="to be purged", butler="general")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL memproj.allow_event_purge = 'on'")
        MemoryEvent.objects.filter(tenant_id=member.caller.tenant_id).delete()
    assert not MemoryEvent.objects.exists()
    episode_store(caller=member.caller, content="after the purge", butler="general")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        MemoryEvent.objects.all().delete()


def test_forgotten_is_an_alias_of_retracted():
    from memory import validation
    from memory.errors import InvalidArgument

    assert validation.validity("forgotten") == "retracted"
    assert validation.validity("retracted") == "retracted"
    with pytest.raises(InvalidArgument):
        validation.validity("deleted")
