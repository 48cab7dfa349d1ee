"""A revoked API token stays revoked: once ``revoked_at`` is set, no UPDATE may
clear or move it. ``ApiToken.save`` never writes the column and
``token_revoke`` sets it only where it is NULL; this trigger holds the rule for
every other way a row can change (a queryset ``update``, raw SQL, a shell).
As with mem0's and Zep's API keys, access comes back through a new token."""

from django.db import migrations

FORBID_UNREVOKE = """
CREATE OR REPLACE FUNCTION memproj_apitoken_revocation_final() RETURNS trigger AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'API token % is revoked; a revocation is final (issue a new token)', OLD.prefix
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER policy_apitoken_revocation_final
    BEFORE UPDATE OF revoked_at ON policy_apitoken
    FOR EACH ROW EXECUTE FUNCTION memproj_apitoken_revocation_final();
"""

ALLOW_UNREVOKE = """
DROP TRIGGER IF EXISTS policy_apitoken_revocation_final ON policy_apitoken;
DROP FUNCTION IF EXISTS memproj_apitoken_revocation_final();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("policy", "0006_policyevent_actor_token_id"),
    ]

    operations = [migrations.RunSQL(FORBID_UNREVOKE, ALLOW_UNREVOKE)]
