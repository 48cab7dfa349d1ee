"""All of the terms (AND) as a tsquery: the keyword channel's first candidates
(memory/retrieval.py), a GIN intersection that stays small in a large tenant."""

from django.db import migrations

SQL = r"""
CREATE OR REPLACE FUNCTION memproj_all_query(terms text[]) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (
    SELECT nullif(string_agg('''' || replace(replace(term, '\', '\\'), '''', '''''') || '''', ' & '), '')::tsquery
    FROM unnest(terms) AS term
);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0024_linkkind_without_duplicate_of"),
    ]

    operations = [migrations.RunSQL(SQL, "DROP FUNCTION IF EXISTS memproj_all_query(text[]);")]
