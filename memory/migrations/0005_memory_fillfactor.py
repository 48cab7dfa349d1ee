from django.db import migrations


class Migration(migrations.Migration):
    """Leave room on each page so reference-count bumps, confirmations and
    outcome counters are HOT updates (no new index entries, in HNSW least of all)."""

    dependencies = [("memory", "0004_fact_state_schedule")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory SET (fillfactor = 85);",
            "ALTER TABLE memory_memory RESET (fillfactor);",
        )
    ]
