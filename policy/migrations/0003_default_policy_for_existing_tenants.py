"""Every tenant that existed before policies gets the default policy (version
0.0.0, the values of pce-memory's example policy), so no tenant is left unconfigured."""

import hashlib

from django.db import migrations


def give_default_policy(apps, schema_editor):
    from policy.document import DEFAULT_POLICY, DEFAULT_POLICY_YAML

    Tenant = apps.get_model("policy", "Tenant")
    PolicyVersion = apps.get_model("policy", "PolicyVersion")
    have_policy = PolicyVersion.objects.filter(is_current=True).values("tenant_id")
    document = DEFAULT_POLICY.to_dict()
    digest = hashlib.sha256(DEFAULT_POLICY_YAML.encode("utf-8")).hexdigest()
    PolicyVersion.objects.bulk_create(
        [
            PolicyVersion(
                tenant_id=tenant_id,
                version="0.0.0",
                major=0,
                minor=0,
                patch=0,
                release_rank=1,
                source_yaml=DEFAULT_POLICY_YAML,
                source_sha256=digest,
                document=document,
                is_current=True,
                applied_by_name="memproj (default policy)",
            )
            for tenant_id in Tenant.objects.exclude(id__in=have_policy).values_list("id", flat=True)
        ],
        batch_size=500,
    )


class Migration(migrations.Migration):
    dependencies = [("policy", "0002_policy_documents")]

    operations = [migrations.RunPython(give_default_policy, migrations.RunPython.noop)]
