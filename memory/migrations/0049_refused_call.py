# The log of refused tool calls (memory.models.RefusedCall, memory/services/refusals.py):
# pce-memory's spec logs every call; a refusal changes nothing, so it is not an
# audit event but a row here, with no argument values.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0048_reembed_unshareable_previous_turns"),
    ]

    operations = [
        migrations.CreateModel(
            name="RefusedCall",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("tenant_id", models.UUIDField()),
                ("principal_id", models.UUIDField(blank=True, null=True)),
                ("token_id", models.UUIDField(blank=True, null=True)),
                ("toolset", models.CharField(max_length=32)),
                ("tool", models.CharField(max_length=100)),
                ("code", models.CharField(max_length=64)),
                ("core_code", models.CharField(blank=True, default="", max_length=64)),
                ("message", models.CharField(blank=True, default="", max_length=500)),
                (
                    "surface",
                    models.CharField(choices=[("mcp", "MCP"), ("http", "REST (/api/<toolset>/<tool>)")], max_length=8),
                ),
                ("request_id", models.CharField(blank=True, default="", max_length=100)),
                ("argument_names", models.JSONField(blank=True, default=list)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["-id"],
                "indexes": [
                    models.Index(fields=["tenant_id", "-id"], name="refused_call_tenant_idx"),
                    models.Index(
                        condition=models.Q(("token_id__isnull", False)),
                        fields=["token_id", "-id"],
                        name="refused_call_token_idx",
                    ),
                ],
            },
        ),
    ]
