from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("policy", "0003_default_policy_for_existing_tenants")]

    operations: list = []
