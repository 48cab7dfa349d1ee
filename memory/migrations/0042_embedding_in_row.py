# A memory's vector is kept in its row. PostgreSQL moves values out of line
# (TOAST) once a row passes ~2 kB, and pgvector's vector type asks to go first:
# a 384-dimension vector is 1.5 kB, so a turn of a hundred characters already
# had its vector moved. The planner prices a scan of the table by its heap pages
# and never counts the TOAST chunks it fetches, two per vector, so for a small
# tenant it chose an exact scan and sort of every vector over a walk of its
# graph, at several times the cost. In the row, the heap's pages are what such
# a scan reads, and the estimate is honest again.
#
# STORAGE MAIN keeps the vector inline while the row fits a page (a long text
# leaves first); toast_tuple_target lets rows grow to a page before anything
# leaves, so the search vector the keyword channel reads per candidate stays
# in the row too. Rows written before this keep their out-of-line vectors
# until rewritten: VACUUM FULL memory_memory (it locks the table) moves them in.

from django.db import migrations

FORWARD = """
ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE memory_memory SET (toast_tuple_target = 8160);
"""

BACKWARD = """
ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE EXTERNAL;
ALTER TABLE memory_memory RESET (toast_tuple_target);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0041_graph_groups'),
    ]

    operations = [
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
