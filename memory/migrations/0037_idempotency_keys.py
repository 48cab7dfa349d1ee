import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0036_active_context_expiry"), ("policy", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("principal_id", models.UUIDField()),
                ("scope", models.CharField(help_text="surface:dialect.tool", max_length=200)),
                ("key", models.CharField(max_length=255)),
                (
                    "fingerprint",
                    models.CharField(help_text="SHA-256 of the canonical JSON of the request", max_length=64),
                ),
                ("answer", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("expires_at", models.DateTimeField(db_index=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="policy.tenant"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "principal_id", "scope", "key"), name="idempotency_key_unique_per_scope"
                    )
                ],
            },
        ),
    ]
