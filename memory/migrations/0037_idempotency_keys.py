from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0036_active_context_expiry")]

    operations: list = []
