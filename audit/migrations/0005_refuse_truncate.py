from django.db import migrations

# Row triggers do not fire on TRUNCATE: without this one, `TRUNCATE audit_auditevent` (or `manage.py flush`)
# would empty the log, and verify_audit would report an intact chain of 0 events.
# A session that sets `audit.allow_truncate = on` may truncate: the test settings do, because Django's flush
# between transactional tests truncates every table. The trigger guards against mistakes, not against the
# table's owner, who could drop it anyway.
CREATE = """
CREATE OR REPLACE FUNCTION audit_event_no_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('audit.allow_truncate', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'audit_auditevent is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_event_no_truncate
    BEFORE TRUNCATE ON audit_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_no_truncate();
"""
DROP = """
DROP TRIGGER IF EXISTS audit_event_no_truncate ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_event_no_truncate();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_prev_hash_unique")]

    operations = [migrations.RunPython(forwards, backwards)]
