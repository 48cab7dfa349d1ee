from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0034_hnsw_half_precision")]

    operations: list = []
