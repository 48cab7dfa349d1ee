from django.db import migrations

FORBID_CHANGES = """
CREATE OR REPLACE FUNCTION memproj_memory_event_append_only() RETURNS trigger AS $$
BEGIN
    -- The purge service (right-to-be-forgotten) is the one sanctioned deleter;
    -- it switches the guard off for its own transaction only (SET LOCAL).
    IF TG_OP = 'DELETE' AND current_setting('memproj.allow_event_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'memory_memoryevent is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER memory_event_append_only
    BEFORE UPDATE OR DELETE ON memory_memoryevent
    FOR EACH ROW EXECUTE FUNCTION memproj_memory_event_append_only();
"""

ALLOW_CHANGES = """
DROP TRIGGER IF EXISTS memory_event_append_only ON memory_memoryevent;
DROP FUNCTION IF EXISTS memproj_memory_event_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunSQL(FORBID_CHANGES, ALLOW_CHANGES)]
