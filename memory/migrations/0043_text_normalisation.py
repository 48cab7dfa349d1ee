"""The keyword channel folds Unicode variants of one word into one term.

The analysis of migration 0010 took text as typed, so a memory was not found by
its own words written another way: full-width Latin (``ＡＰＩ``, common in
Japanese text) or half-width katakana (``ｶﾀｶﾅ``) against their usual forms, a
decomposed accent against the precomposed letter, a ligature (``ﬁ``), a word
with an invisible character inside (zero-width space, soft hyphen, an
ideographic variation selector after a kanji), or a Greek word ending in a
final sigma against its capitals (``to_tsvector`` lowercases ``Σ`` to ``σ`` and
keeps ``ς``). Text is now folded first (``memproj_fold``): invisible characters
removed, then NFKC, then the final sigma mapped to ``σ``; both the stored
search vector and the query's terms go through ``memproj_search_vector``, so
both sides still analyse alike. The CJK bigrams also cover the ideographs
outside the Basic Multilingual Plane (extensions B to H, e.g. ``𠮷``), which
were indexed as whole runs. ``normalize`` needs a UTF-8 database, as the CJK
ranges of migration 0010 already do.

The GIN indexes are on the stored column, not an expression, so they stay as
they are. Only the rows whose search vector changes are rewritten (a rewrite
of the table would rebuild every vector graph; English text folds to itself),
in batches by id, each committed on its own, so neither memory nor row locks
grow with the table. Each row is rewritten by an UPDATE of its content, which
recomputes the generated column and fires the term statistics' row trigger
(migration 0011) as any edit does; the terms left at a zero document
frequency are removed at the end. The migration can be run again after an
interruption, and backwards it restores and recomputes the old analysis.
"""

import importlib

from django.db import migrations, transaction

# Removed before analysis: soft hyphen, zero-width space, non-joiner and joiner,
# word joiner, byte order mark, and the variation selectors (standardised and
# ideographic); NFKC keeps all of these, and inside a word each splits it.
INVISIBLE = "[\u00ad\u200b-\u200d\u2060\ufeff\ufe00-\ufe0f\U000e0100-\U000e01ef]"

# Migration 0010's ranges, and the supplementary ideographs (extensions B-H and
# the compatibility supplement, U+20000-U+323AF).
CJK = (
    "\u3005\u3006\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af"
    "\U00020000-\U000323af"
)

FUNCTIONS = f"""
-- ASCII text (one byte per character) folds to itself: it skips the work.
CREATE OR REPLACE FUNCTION memproj_fold(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE
    WHEN octet_length(t) = char_length(t) THEN t
    ELSE replace(normalize(regexp_replace(t, '{INVISIBLE}', '', 'g'), NFKC), 'ς', 'σ')
END;

CREATE OR REPLACE FUNCTION memproj_cjk_bigrams(t text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    parts text[] := ARRAY[]::text[];
    piece text[];
    run text;
    i int;
BEGIN
    IF t !~ '[{CJK}]' THEN
        RETURN t;  -- the common case costs one regex test
    END IF;
    FOR piece IN SELECT regexp_matches(t, '([{CJK}]+)|([^{CJK}]+)', 'g') LOOP
        IF piece[1] IS NULL THEN
            parts := parts || piece[2];
        ELSE
            run := piece[1];
            IF char_length(run) = 1 THEN
                parts := parts || run;
            ELSE
                FOR i IN 1 .. char_length(run) - 1 LOOP
                    parts := parts || substr(run, i, 2);
                END LOOP;
            END IF;
        END IF;
    END LOOP;
    RETURN array_to_string(parts, ' ');
END
$fn$;

CREATE OR REPLACE FUNCTION memproj_search_vector(t text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_tsvector('english'::regconfig, memproj_cjk_bigrams(memproj_fold(t)));
"""

# Backwards: migration 0010's functions, then the fold nothing calls any more.
RESTORE_FUNCTIONS = (
    importlib.import_module("memory.migrations.0010_search_vector_cjk").FUNCTIONS
    + "DROP FUNCTION IF EXISTS memproj_fold(text);"
)

# One batch of ids after %(after)s: the rows whose stored vector differs from
# what the current analysis makes of their content are rewritten. ASCII text
# (one byte per character) is analysed alike before and after this migration,
# so only the other rows are analysed again. The last id of the batch is where
# the next one starts; none means the table is done.
RECOMPUTE_BATCH = """
WITH batch AS (
    SELECT id FROM memory_memory
    WHERE id > %(after)s::uuid
    ORDER BY id
    LIMIT %(size)s
), rewritten AS (
    UPDATE memory_memory m SET content = m.content
    FROM batch
    WHERE m.id = batch.id
      AND octet_length(m.content) <> char_length(m.content)
      AND m.search_vector IS DISTINCT FROM memproj_search_vector(m.content)
)
SELECT id FROM batch ORDER BY id DESC LIMIT 1
"""

BATCH_SIZE = 2000
BEFORE_ANY_ID = "00000000-0000-0000-0000-000000000000"


def recompute_search_vectors(schema_editor):
    connection = schema_editor.connection
    after = BEFORE_ANY_ID
    while after is not None:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(RECOMPUTE_BATCH, {"after": after, "size": BATCH_SIZE})
            row = cursor.fetchone()
        after = None if row is None else str(row[0])
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute("DELETE FROM memory_termstat WHERE df <= 0")


def fold(apps, schema_editor):  # noqa: ARG001 - RunPython's signature
    schema_editor.execute(FUNCTIONS)
    recompute_search_vectors(schema_editor)


def unfold(apps, schema_editor):  # noqa: ARG001 - RunPython's signature
    schema_editor.execute(RESTORE_FUNCTIONS)
    recompute_search_vectors(schema_editor)


class Migration(migrations.Migration):
    # Each batch commits on its own (see the module's docstring).
    atomic = False

    dependencies = [
        ("memory", "0042_embedding_in_row"),
    ]

    operations = [migrations.RunPython(fold, unfold)]
