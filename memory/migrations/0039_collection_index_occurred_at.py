"""roampal's listings (``days_back`` without a query, recency order) read when a
memory happened (``occurred_at``, which an import keeps apart from when it was
stored): their index follows."""

from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    dependencies = [("memory", "0038_occurred_at_and_aliases")]

    operations = [
        migrations.RemoveIndex(model_name="memory", name="memory_collection_idx"),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=~Q(collection=""),
                fields=["tenant", "collection", "-occurred_at"],
                name="memory_collection_idx",
            ),
        ),
    ]
