from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0035_audit_chain_keyed")]

    operations: list = []
