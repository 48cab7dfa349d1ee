"""Vectors made from a previous turn that may not go into them any more lose it.

A turn of a session is embedded with the turn before it (memory/embedtext.py),
which now goes in only while it is active, within its TTL and of the turn's own
boundary class. Vectors written before those rules, in an existing deployment,
may still hold a previous turn of another class (a reader who may not see a
secret turn finds the reply after it by the secret's words), or one that has
left retrieval since (expired, forgotten or replaced) without the turn after it
being embedded again.

A row does not record which previous turn its vector was made from, only the
text version it was made under (``embedding_model``: ``<model>+ctx1`` or
``+ctx1short``), so a vector is dropped when it may hold such a turn: it was
made under a contextual version, its turn is short enough to take context
(800 characters, ``CONTEXT_MAX_CHARS``), and

- the turn before it now (the latest active episode of its session before it)
  is past its TTL or of another boundary class; or
- a turn between that one and it is no longer active (forgotten or replaced):
  it was the turn before it when it was active;

and that turn's text goes in under the version (``ctx1``: always; ``ctx1short``:
when it is at most 300 characters, ``PREVIOUS_CHARS``). A vector made after the
rules, which leaves such a turn out, is dropped too and made again alike. The
conditions are those of embedtext's ``_TURN_BEFORE_SQL``,
``PREVIOUS_SHAREABLE_SQL`` and ``_FOLLOWING_SQL`` at this migration, written out
here because a migration runs on its own schema, not on the models' of later
versions. A turn whose previous turn was deleted since (a purge, the expiry
sweep's deletion) cannot be told from here.

A dropped vector is left as ``vectors.turns_unembed`` leaves one: no vector,
``embedding_status`` pending, no error, no attempts, ``updated_at`` now. The
turn is found by its own words only (keywords) until the embedding retry sweep
(``reembedding.embeddings_retry``, beat entry ``embeddings-retry``, every
minute) embeds it again through ``memory_embed_batch`` from what is visible
then, a bounded batch per tenant per run; these rows are older than its grace
period, so the first run takes them. No outbox follow-up is recorded:
``turns_unembed`` records one so that its commit hands the turns to the worker
at once, which a migration cannot do, and the drain sweep leaves the follow-up
of a turn that waits for a vector to the retry sweep anyway.

The table is read in batches by id, each committed on its own (as migration
0043), so neither memory nor row locks grow with it; the rows a batch drops
are locked in primary-key order, as every multi-row writer locks them. It can
be run again after an interruption. Backwards it does nothing: the vectors dropped
are made again from what the rules let in, and there is nothing to restore.
"""

from django.db import migrations, transaction

# Whether the vector of ``{turn}`` (ready) may hold the text of ``{previous}``.
MAY_HOLD = """{turn}.embedding_status = 'ready' AND {turn}.kind = 'episode' AND {turn}.session_id <> ''
      AND char_length({turn}.content) <= 800 AND {previous}.content <> ''
      AND ({turn}.embedding_model LIKE '%%+ctx1'
           OR ({turn}.embedding_model LIKE '%%+ctx1short' AND char_length({previous}.content) <= 300))"""

# One batch of rows after id %(after)s, read once by the primary key: each arm
# starts from the batch's own columns (joined back to the table, the planner
# could take every non-active episode of the table for each batch). ``prev``:
# the turn before a turn ``m`` of the batch now; ``nxt``: the turn after a turn
# ``t`` of the batch that has left (forgotten or replaced), whose previous turn
# it was while it was active. Both one probe of memory_session_turn_idx. The
# last id of the batch is where the next one starts; none means the table is done.
DROP_BATCH = f"""
WITH batch AS (
    SELECT id, tenant_id, kind, session_id, created_at, validity, boundary_class, content,
           embedding_status, embedding_model
    FROM memory_memory
    WHERE id > %(after)s::uuid
    ORDER BY id
    LIMIT %(size)s
), unshareable AS (
    SELECT m.id
    FROM batch m
    JOIN LATERAL (
        SELECT p.content, p.expires_at, p.boundary_class FROM memory_memory p
        WHERE p.tenant_id = m.tenant_id AND p.kind = 'episode' AND p.session_id = m.session_id
          AND p.session_id <> '' AND p.validity = 'active'
          AND (p.created_at, p.id) < (m.created_at, m.id)
        ORDER BY p.created_at DESC, p.id DESC
        LIMIT 1
    ) prev ON true
    WHERE {MAY_HOLD.format(turn="m", previous="prev")}
      AND NOT ((prev.expires_at IS NULL OR prev.expires_at > now()) AND prev.boundary_class = m.boundary_class)
    UNION
    SELECT nxt.id
    FROM batch t
    JOIN LATERAL (
        SELECT n.id, n.kind, n.session_id, n.content, n.embedding_status, n.embedding_model FROM memory_memory n
        WHERE n.tenant_id = t.tenant_id AND n.kind = 'episode' AND n.session_id = t.session_id
          AND n.session_id <> '' AND n.validity = 'active'
          AND (n.created_at, n.id) > (t.created_at, t.id)
        ORDER BY n.created_at, n.id
        LIMIT 1
    ) nxt ON true
    WHERE t.kind = 'episode' AND t.session_id <> '' AND t.validity <> 'active'
      AND {MAY_HOLD.format(turn="nxt", previous="t")}
), locked AS (
    SELECT id FROM memory_memory
    WHERE id IN (SELECT id FROM unshareable) AND embedding_status = 'ready'
    ORDER BY id
    FOR NO KEY UPDATE
), dropped AS (
    UPDATE memory_memory m
    SET embedding = NULL, embedding_status = 'pending', embedding_error = '', embedding_attempts = 0,
        updated_at = now()
    FROM locked
    WHERE m.id = locked.id
)
SELECT id FROM batch ORDER BY id DESC LIMIT 1
"""  # noqa: S608 - only constants are spliced in

BATCH_SIZE = 2000
BEFORE_ANY_ID = "00000000-0000-0000-0000-000000000000"


def drop_unshareable_vectors(connection):
    after: str | None = BEFORE_ANY_ID
    while after is not None:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(DROP_BATCH, {"after": after, "size": BATCH_SIZE})
            row = cursor.fetchone()
        after = None if row is None else str(row[0])


def forwards(apps, schema_editor):  # noqa: ARG001 - RunPython's signature
    drop_unshareable_vectors(schema_editor.connection)


class Migration(migrations.Migration):
    # Each batch commits on its own (see the module's docstring).
    atomic = False

    dependencies = [
        ("memory", "0047_namespace_statistics"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
