"""The audit log made tamper-resistant and tamper-evident (issue 15).

- Each event carries a sha256 chained to its tenant's previous event; the one
  writer is ``memproj_events_append`` (called by memory/services/events.py),
  which serialises a tenant's appends with an advisory lock.
- UPDATE and DELETE are refused except inside ``memproj_purge_events``, a
  SECURITY DEFINER function (no session flag anyone could set); TRUNCATE is
  refused by a statement trigger. The service's role owns nothing, so it can
  neither disable the triggers nor replace the functions (memproj/dbroles.py).
- Existing rows are chained in id order.

The hash recipe is restated in Python by memory/services/events.py::event_hash
(``manage.py audit_verify``); keep the two in step."""

from django.db import migrations

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION memproj_event_hash(
    prev text, tenant uuid, event_type text, memory uuid, memory_kind text, actor uuid, payload jsonb,
    created timestamptz
) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(concat_ws(E'\n',
        prev, tenant::text, event_type, coalesce(memory::text, ''), memory_kind, coalesce(actor::text, ''),
        payload::text, to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    ), 'UTF8')), 'hex')
$$;

-- The one writer: appends rows (a JSON array of objects) in order, each
-- chained to its tenant's previous event. Tenants are locked in a stable order.
CREATE OR REPLACE FUNCTION memproj_events_append(p_rows jsonb)
RETURNS TABLE (id bigint, hash text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r jsonb;
    t uuid;
    prev text;
    heads jsonb := '{}'::jsonb;
    v_created timestamptz;
    v_payload jsonb;
    v_hash text;
BEGIN
    FOR t IN SELECT DISTINCT (e->>'tenant_id')::uuid AS t FROM jsonb_array_elements(p_rows) e ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('memproj.events.' || t::text, 0));
    END LOOP;
    FOR r IN SELECT e FROM jsonb_array_elements(p_rows) e LOOP
        t := (r->>'tenant_id')::uuid;
        IF heads ? t::text THEN
            prev := heads->>t::text;
        ELSE
            SELECT ev.hash INTO prev FROM memory_memoryevent ev WHERE ev.tenant_id = t ORDER BY ev.id DESC LIMIT 1;
            prev := coalesce(prev, '');
        END IF;
        v_created := coalesce((r->>'created_at')::timestamptz, clock_timestamp());
        v_payload := coalesce(r->'payload', '{}'::jsonb);
        v_hash := memproj_event_hash(prev, t, r->>'event_type', (r->>'memory_id')::uuid,
                                     coalesce(r->>'memory_kind', ''), (r->>'actor_principal_id')::uuid,
                                     v_payload, v_created);
        INSERT INTO memory_memoryevent AS ev
            (tenant_id, memory_id, memory_kind, event_type, actor_principal_id, payload, created_at, prev_hash, hash)
        VALUES (t, (r->>'memory_id')::uuid, coalesce(r->>'memory_kind', ''), r->>'event_type',
                (r->>'actor_principal_id')::uuid, v_payload, v_created, prev, v_hash)
        RETURNING ev.id, ev.hash INTO id, hash;
        heads := heads || jsonb_build_object(t::text, v_hash);
        RETURN NEXT;
    END LOOP;
END;
$$;

-- The one sanctioned deleter (right to be forgotten). Deletes a tenant's
-- events (p_principal NULL) or those about the given memories or acted by the
-- principal, re-chains what remains, and appends the purge event itself, so a
-- purge is always on the record.
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
                UPDATE memory_memoryevent SET prev_hash = prev,
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

-- Changes to existing rows happen only inside the purge function, which runs
-- as the table's owner: both conditions, so neither a session flag nor a
-- look-alike function of another role opens the guard.
CREATE OR REPLACE FUNCTION memproj_memory_event_append_only() RETURNS trigger AS $$
DECLARE
    stack text;
BEGIN
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

CREATE OR REPLACE FUNCTION memproj_memory_event_no_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'memory_memoryevent is append-only (TRUNCATE refused)' USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS memory_event_no_truncate ON memory_memoryevent;
CREATE TRIGGER memory_event_no_truncate
    BEFORE TRUNCATE ON memory_memoryevent
    FOR EACH STATEMENT EXECUTE FUNCTION memproj_memory_event_no_truncate();
"""

# Existing rows, chained in id order per tenant (the guard is off for this
# migration's own statement only: the trigger is disabled by the owner).
BACKFILL = r"""
ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only;
DO $$
DECLARE
    ev record;
    prev text;
    last_tenant uuid;
BEGIN
    FOR ev IN SELECT * FROM memory_memoryevent ORDER BY tenant_id, id LOOP
        IF last_tenant IS DISTINCT FROM ev.tenant_id THEN
            prev := '';
            last_tenant := ev.tenant_id;
        END IF;
        UPDATE memory_memoryevent SET prev_hash = prev,
            hash = memproj_event_hash(prev, ev.tenant_id, ev.event_type, ev.memory_id, ev.memory_kind,
                                      ev.actor_principal_id, ev.payload, ev.created_at)
         WHERE id = ev.id RETURNING hash INTO prev;
    END LOOP;
END $$;
ALTER TABLE memory_memoryevent ENABLE TRIGGER memory_event_append_only;
"""

REVERSE = r"""
DROP TRIGGER IF EXISTS memory_event_no_truncate ON memory_memoryevent;
DROP FUNCTION IF EXISTS memproj_memory_event_no_truncate();
DROP FUNCTION IF EXISTS memproj_purge_events(uuid, text, uuid, jsonb, uuid[], uuid);
DROP FUNCTION IF EXISTS memproj_events_append(jsonb);
DROP FUNCTION IF EXISTS memproj_event_hash(text, uuid, text, uuid, text, uuid, jsonb, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0027_followup_outbox_event_hash")]

    operations = [migrations.RunSQL(FUNCTIONS + BACKFILL, REVERSE)]
