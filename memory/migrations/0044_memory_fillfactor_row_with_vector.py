# Migration 0005 left 15% of each page free so that the writes a read makes (a
# reference count bumped, an access time, a confirmation, outcome counters) are
# HOT updates: the new version on the same page, no new index entries. Since
# 0042 a row carries its 1.5 kB vector and is some 2 kB, more than 15% of a page,
# so no page had room for a second version: each such write added an entry to
# every index of the row, two HNSW graphs among them (a graph insertion is a
# search of the graph), and left dead entries for vacuum to repair. Inserts
# stop at 65% of a page: a page that closes with two or more rows keeps more
# free than any one of them takes (65% < 2/3), one with a single row keeps
# room for a second version of it up to some 4 kB. A page holds two typical
# rows instead of three. Pages already written keep their
# old fill until rewritten (VACUUM FULL memory_memory, which locks the table).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0043_text_normalisation")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory SET (fillfactor = 65);",
            "ALTER TABLE memory_memory SET (fillfactor = 85);",
        )
    ]
