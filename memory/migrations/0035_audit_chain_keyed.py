"""The audit chain keyed (issue 23): each event also carries ``mac``,
HMAC-SHA256 of its hash with a key the database never holds
(memory/services/events.py). Without it, whoever could connect as the owner
or the superuser could disable the guard, edit an event and recompute its
tenant's sha256 chain, and the chain still verified.

- ``mac`` starts empty; the writer sets it in the append's own transaction.
  The append-only trigger allows exactly that update (``mac`` from '' to a
  value, every other column unchanged); the service's role may update that
  column only (memproj/dbroles.py).
- The purge function clears the MAC of the rows it re-chains (their hash
  changes); ``memory/services/purge.py`` seals them again afterwards.
- Existing events are keyed once, here, by this (Python) step: per tenant the
  rows whose chain verifies, up to the first that does not; rows after such a
  break keep no MAC and ``audit_verify`` reports them."""

from importlib import import_module

from django.db import migrations, models

# Going back: 0028's functions again (they never touch ``mac``), before the column goes.
PREVIOUS_FUNCTIONS = import_module("memory.migrations.0028_audit_log_chain_and_purge_function").FUNCTIONS

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION memproj_memory_event_append_only() RETURNS trigger AS $$
DECLARE
    stack text;
BEGIN
    -- The writer's seal: the MAC set once, nothing else changed.
    IF TG_OP = 'UPDATE' AND OLD.mac = '' AND NEW.mac <> ''
       AND (NEW.id, NEW.tenant_id, NEW.memory_id, NEW.memory_kind, NEW.event_type, NEW.actor_principal_id,
            NEW.payload, NEW.created_at, NEW.prev_hash, NEW.hash)
           IS NOT DISTINCT FROM (OLD.id, OLD.tenant_id, OLD.memory_id, OLD.memory_kind, OLD.event_type,
            OLD.actor_principal_id, OLD.payload, OLD.created_at, OLD.prev_hash, OLD.hash) THEN
        RETURN NEW;
    END IF;
    GET DIAGNOSTICS stack = PG_CONTEXT;
    IF TG_OP IN ('DELETE', 'UPDATE')
       AND current_user = (SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = TG_RELID)
       AND stack LIKE '%function memproj_purge_events(%' THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        -- The purge may re-chain, nothing else.
        IF (NEW.tenant_id, NEW.memory_id, NEW.memory_kind, NEW.event_type, NEW.actor_principal_id, NEW.payload,
            NEW.created_at) IS NOT DISTINCT FROM (OLD.tenant_id, OLD.memory_id, OLD.memory_kind, OLD.event_type,
            OLD.actor_principal_id, OLD.payload, OLD.created_at) THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'memory_memoryevent is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

-- As in 0028, but a re-chained row loses its MAC (its hash changed): the
-- caller, which holds the key, seals it again.
CREATE OR REPLACE FUNCTION memproj_purge_events(
    p_tenant uuid, p_event_type text, p_actor uuid, p_payload jsonb, p_memory_ids uuid[], p_principal uuid
) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    deleted bigint;
    first_gap bigint;
    prev text := '';
    ev record;
BEGIN
    IF p_event_type NOT IN ('tenant_purged', 'principal_purged') THEN
        RAISE EXCEPTION 'unknown purge event type %', p_event_type USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('memproj.events.' || p_tenant::text, 0));
    IF p_principal IS NULL THEN
        DELETE FROM memory_memoryevent WHERE tenant_id = p_tenant;
        GET DIAGNOSTICS deleted = ROW_COUNT;
    ELSE
        SELECT min(e.id) INTO first_gap FROM memory_memoryevent e
         WHERE e.tenant_id = p_tenant
           AND (e.memory_id = ANY(coalesce(p_memory_ids, '{}')) OR e.actor_principal_id = p_principal);
        DELETE FROM memory_memoryevent e
         WHERE e.tenant_id = p_tenant
           AND (e.memory_id = ANY(coalesce(p_memory_ids, '{}')) OR e.actor_principal_id = p_principal);
        GET DIAGNOSTICS deleted = ROW_COUNT;
        IF first_gap IS NOT NULL THEN
            SELECT e.hash INTO prev FROM memory_memoryevent e
             WHERE e.tenant_id = p_tenant AND e.id < first_gap ORDER BY e.id DESC LIMIT 1;
            prev := coalesce(prev, '');
            FOR ev IN SELECT * FROM memory_memoryevent e WHERE e.tenant_id = p_tenant AND e.id > first_gap
                      ORDER BY e.id LOOP
                UPDATE memory_memoryevent SET prev_hash = prev, mac = '',
                    hash = memproj_event_hash(prev, ev.tenant_id, ev.event_type, ev.memory_id, ev.memory_kind,
                                              ev.actor_principal_id, ev.payload, ev.created_at)
                 WHERE memory_memoryevent.id = ev.id
                RETURNING memory_memoryevent.hash INTO prev;
            END LOOP;
        END IF;
    END IF;
    PERFORM memproj_events_append(jsonb_build_array(jsonb_build_object(
        'tenant_id', p_tenant, 'event_type', p_event_type, 'actor_principal_id', p_actor,
        'payload', coalesce(p_payload, '{}'::jsonb) || jsonb_build_object('events', deleted))));
    RETURN deleted;
END;
$$;
REVOKE ALL ON FUNCTION memproj_purge_events(uuid, text, uuid, jsonb, uuid[], uuid) FROM PUBLIC;
"""


def seal_existing_events(apps, schema_editor):  # noqa: ARG001 - RunPython's signature
    from memory.services.events import events_seal_unkeyed

    events_seal_unkeyed()


class Migration(migrations.Migration):
    dependencies = [("memory", "0034_hnsw_half_precision")]

    operations = [
        migrations.AddField(
            model_name="memoryevent",
            name="mac",
            field=models.CharField(blank=True, db_default="", editable=False, max_length=64),
        ),
        migrations.RunSQL(FUNCTIONS, PREVIOUS_FUNCTIONS),
        migrations.RunPython(seal_existing_events, migrations.RunPython.noop),
    ]
