"""Audit events name the API token of the call (``actor_token_id``), and the
chain hashes it: a principal may hold several tokens, and after a leak the log
must tell what one of them did, in a way an edit cannot hide.

- ``actor_token_id`` is a plain UUID, no foreign key: deleting a token neither
  removes its events nor changes their hashed content.
- ``hash_version`` says which recipe a row's hash follows. The existing rows
  are version 1 (the column's default) and keep the recipe of migration 0028;
  ``memproj_events_append`` writes version 2, whose content adds a version tag
  and the token. ``memproj_event_hash`` takes the version and knows both; the
  purge function re-chains each row with its own version. The Python side is
  memory/services/events.py::event_hash; keep the two in step.
- The append-only trigger now also holds ``actor_token_id`` and
  ``hash_version`` fixed for the seal and the purge's re-chaining.

Going back restores the earlier functions and drops both columns: events
written since then no longer verify under the earlier recipe."""

from importlib import import_module

from django.db import migrations, models

# Going back: 0028's functions, then 0035's over them (what stood before this migration).
PREVIOUS_FUNCTIONS = (
    import_module("memory.migrations.0028_audit_log_chain_and_purge_function").FUNCTIONS
    + import_module("memory.migrations.0035_audit_chain_keyed").FUNCTIONS
    + """
DROP FUNCTION IF EXISTS memproj_event_hash(integer, text, uuid, text, uuid, text, uuid, uuid, jsonb, timestamptz);
"""
)

FUNCTIONS = r"""
-- The chain's one recipe, by version. 1: the recipe of migration 0028 (events
-- written before the token was recorded). 2: a version tag first, the token
-- after the actor. Any other version hashes to NULL, which no row may hold.
CREATE OR REPLACE FUNCTION memproj_event_hash(
    version integer, prev text, tenant uuid, event_type text, memory uuid, memory_kind text, actor uuid,
    token uuid, payload jsonb, created timestamptz
) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(CASE version
        WHEN 1 THEN concat_ws(E'\n',
            prev, tenant::text, event_type, coalesce(memory::text, ''), memory_kind, coalesce(actor::text, ''),
            payload::text, s.stamp)
        WHEN 2 THEN concat_ws(E'\n',
            'v2', prev, tenant::text, event_type, coalesce(memory::text, ''), memory_kind, coalesce(actor::text, ''),
            coalesce(token::text, ''), payload::text, s.stamp)
    END, 'UTF8')), 'hex')
    FROM (SELECT to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS stamp) AS s
$$;

-- As in 0028, with the token, at version 2.
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
        v_hash := memproj_event_hash(2, prev, t, r->>'event_type', (r->>'memory_id')::uuid,
                                     coalesce(r->>'memory_kind', ''), (r->>'actor_principal_id')::uuid,
                                     (r->>'actor_token_id')::uuid, v_payload, v_created);
        INSERT INTO memory_memoryevent AS ev
            (tenant_id, memory_id, memory_kind, event_type, actor_principal_id, actor_token_id, payload, created_at,
             prev_hash, hash, hash_version)
        VALUES (t, (r->>'memory_id')::uuid, coalesce(r->>'memory_kind', ''), r->>'event_type',
                (r->>'actor_principal_id')::uuid, (r->>'actor_token_id')::uuid, v_payload, v_created, prev, v_hash, 2)
        RETURNING ev.id, ev.hash INTO id, hash;
        heads := heads || jsonb_build_object(t::text, v_hash);
        RETURN NEXT;
    END LOOP;
END;
$$;

-- As in 0035; each re-chained row keeps its own version.
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
                    hash = memproj_event_hash(ev.hash_version, prev, ev.tenant_id, ev.event_type, ev.memory_id,
                                              ev.memory_kind, ev.actor_principal_id, ev.actor_token_id, ev.payload,
                                              ev.created_at)
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

-- As in 0035, with the token and the version among what neither the seal nor
-- the purge's re-chaining may change.
CREATE OR REPLACE FUNCTION memproj_memory_event_append_only() RETURNS trigger AS $$
DECLARE
    stack text;
BEGIN
    -- The writer's seal: the MAC set once, nothing else changed.
    IF TG_OP = 'UPDATE' AND OLD.mac = '' AND NEW.mac <> ''
       AND (NEW.id, NEW.tenant_id, NEW.memory_id, NEW.memory_kind, NEW.event_type, NEW.actor_principal_id,
            NEW.actor_token_id, NEW.payload, NEW.created_at, NEW.prev_hash, NEW.hash, NEW.hash_version)
           IS NOT DISTINCT FROM (OLD.id, OLD.tenant_id, OLD.memory_id, OLD.memory_kind, OLD.event_type,
            OLD.actor_principal_id, OLD.actor_token_id, OLD.payload, OLD.created_at, OLD.prev_hash, OLD.hash,
            OLD.hash_version) THEN
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
        IF (NEW.tenant_id, NEW.memory_id, NEW.memory_kind, NEW.event_type, NEW.actor_principal_id,
            NEW.actor_token_id, NEW.payload, NEW.created_at, NEW.hash_version)
           IS NOT DISTINCT FROM (OLD.tenant_id, OLD.memory_id, OLD.memory_kind, OLD.event_type,
            OLD.actor_principal_id, OLD.actor_token_id, OLD.payload, OLD.created_at, OLD.hash_version) THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'memory_memoryevent is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

-- The recipe without a version is gone: one recipe, in the function above.
DROP FUNCTION IF EXISTS memproj_event_hash(text, uuid, text, uuid, text, uuid, jsonb, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0039_collection_index_occurred_at")]

    operations = [
        migrations.AddField(
            model_name="memoryevent",
            name="actor_token_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="memoryevent",
            name="hash_version",
            field=models.PositiveSmallIntegerField(db_default=1, editable=False),
        ),
        migrations.AddIndex(
            model_name="memoryevent",
            index=models.Index(
                condition=models.Q(("actor_token_id__isnull", False)),
                fields=["actor_token_id", "-id"],
                name="memory_event_token_idx",
            ),
        ),
        migrations.RunSQL(FUNCTIONS, PREVIOUS_FUNCTIONS),
    ]
