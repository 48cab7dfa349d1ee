"""Policy events name the API token of the call (``actor_token_id``), as
memory's audit events do since memory migration 0040: a policy apply refused
before the pce tool-call event is written is recorded only here.

A plain nullable UUID, no foreign key: deleting a token keeps its events. The
table is not hash-chained, so the existing rows stay as they are (no token);
adding a nullable column rewrites no row, so the append-only trigger of
migration 0002 is not involved."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("policy", "0005_apitoken_verbose_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="policyevent",
            name="actor_token_id",
            field=models.UUIDField(blank=True, null=True),
        ),
    ]
