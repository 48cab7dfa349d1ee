"""When a memory happened (``occurred_at``) and other systems' ids for a memory
(``MemoryAlias``), for imports from other memory stores.

``occurred_at`` is ``created_at`` unless a writer says otherwise. The ORM fills
it at insert (memory.models.OccurredAtField); a trigger keeps the same rule for
rows written outside the ORM (a COPY), and moves it along when ``created_at`` is
rewritten on a row whose ``occurred_at`` was never set apart from it (a restore
or a benchmark that dates its rows after inserting them)."""

import django.db.models.deletion
from django.db import migrations, models

import memory.models

SQL = """
ALTER TABLE memory_memory ADD COLUMN occurred_at timestamp with time zone NULL;
UPDATE memory_memory SET occurred_at = created_at;
ALTER TABLE memory_memory ALTER COLUMN occurred_at SET NOT NULL;

CREATE FUNCTION memproj_occurred_at_default() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.occurred_at IS NULL THEN
            NEW.occurred_at := NEW.created_at;
        END IF;
    ELSIF NEW.created_at IS DISTINCT FROM OLD.created_at
          AND NEW.occurred_at IS NOT DISTINCT FROM OLD.occurred_at
          AND OLD.occurred_at IS NOT DISTINCT FROM OLD.created_at THEN
        NEW.occurred_at := NEW.created_at;
    END IF;
    RETURN NEW;
END
$fn$;

CREATE TRIGGER memory_occurred_at_default BEFORE INSERT OR UPDATE OF created_at ON memory_memory
    FOR EACH ROW EXECUTE FUNCTION memproj_occurred_at_default();
"""

REVERSE = """
DROP TRIGGER IF EXISTS memory_occurred_at_default ON memory_memory;
DROP FUNCTION IF EXISTS memproj_occurred_at_default();
ALTER TABLE memory_memory DROP COLUMN IF EXISTS occurred_at;
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0037_idempotency_keys"), ("policy", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(SQL, REVERSE)],
            state_operations=[
                migrations.AddField(
                    model_name="memory",
                    name="occurred_at",
                    field=memory.models.OccurredAtField(),
                ),
            ],
        ),
        migrations.CreateModel(
            name="MemoryAlias",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("system", models.CharField(max_length=32)),
                ("alias", models.CharField(max_length=300)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "memory",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="aliases", to="memory.memory"
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memory_aliases",
                        to="policy.tenant",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "memory aliases",
                "ordering": ["id"],
                "indexes": [models.Index(fields=["tenant", "alias"], name="memory_alias_lookup_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "system", "alias"), name="memory_alias_unique_per_system"
                    )
                ],
            },
        ),
    ]
