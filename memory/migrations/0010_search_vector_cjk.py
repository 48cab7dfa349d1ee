"""The keyword channel splits Chinese, Japanese and Korean text (issue 12).

The ``english`` configuration makes one lexeme of a whole run of CJK
characters (``解約APIの命名規約`` is a single word to it), so no query that
is not the exact run finds it. ``memproj_search_vector(text)`` indexes every
CJK run as its overlapping character bigrams (a lone character as itself),
the usual way to search text without spaces, and everything else as before
(``english``: stemmed, stop words dropped). Queries go through the same
function (``memproj_query_terms``), so both sides always split alike; this is
the one text analysis of every dialect.

The generated column is dropped and added again with the new expression
(PostgreSQL < 17 cannot change a generated column's expression in place); the
GIN index is rebuilt with it.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

# Han (incl. extension A and compatibility), hiragana, katakana (incl. the
# prolonged sound mark and halfwidth forms), iteration marks, hangul syllables.
CJK = "\u3005\u3006\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af"

FUNCTIONS = f"""
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
RETURN to_tsvector('english'::regconfig, memproj_cjk_bigrams(t));

-- The distinct lexemes of a query, analysed exactly as documents are.
CREATE OR REPLACE FUNCTION memproj_query_terms(t text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN coalesce(tsvector_to_array(memproj_search_vector(t)), ARRAY[]::text[]);

-- Any of the terms (OR), as a tsquery the GIN index serves; NULL for none.
-- Lexemes are quoted (quotes doubled, backslashes escaped) so no term can be
-- read as tsquery syntax.
CREATE OR REPLACE FUNCTION memproj_any_query(terms text[]) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (
    SELECT nullif(string_agg('''' || replace(replace(term, '\\', '\\\\'), '''', '''''') || '''', ' | '), '')::tsquery
    FROM unnest(terms) AS term
);
"""

DROP_FUNCTIONS = """
DROP FUNCTION IF EXISTS memproj_any_query(text[]);
DROP FUNCTION IF EXISTS memproj_query_terms(text);
DROP FUNCTION IF EXISTS memproj_search_vector(text);
DROP FUNCTION IF EXISTS memproj_cjk_bigrams(text);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_fact_state_db_default"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, DROP_FUNCTIONS),
        migrations.RemoveIndex(model_name="memory", name="memory_search_vector_gin"),
        migrations.RemoveField(model_name="memory", name="search_vector"),
        migrations.AddField(
            model_name="memory",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Func(models.F("content"), function="memproj_search_vector"),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=django.contrib.postgres.indexes.GinIndex(fields=["search_vector"], name="memory_search_vector_gin"),
        ),
    ]
