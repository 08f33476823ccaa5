"""Indexes for the Request Logs page: one (column, created_at, id) index per filter, partial ones for rare rows.

On PostgreSQL they are built and dropped CONCURRENTLY, so a deployment with a large, busy table keeps
ingesting while this migration runs; the new indexes are built before the old ones go. SQLite builds
them the plain way.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class AddIndexOnline(AddIndexConcurrently):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class RemoveIndexOnline(RemoveIndexConcurrently):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


def drop_request_id_like_index(apps, schema_editor):
    """Django adds a varchar_pattern_ops (LIKE) index beside a unique CharField on PostgreSQL. Nothing
    searches request ids by prefix, and a second index over random-looking ids halves the ingest rate."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'requestlogs_requestlog' "
            "AND indexdef LIKE '%%(request_id varchar_pattern_ops)%%'"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


def _time(name, *columns, condition=None):
    return models.Index(fields=[*columns, "-created_at", "-id"], condition=condition, name=name)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("requestlogs", "0001_initial"),
    ]

    operations = [
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_requested_idx", "requested_model")),
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_served_model_idx", "served_model")),
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_provider_idx", "served_provider")),
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_key_idx", "key_id")),
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_team_idx", "team_id")),
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_application_idx", "application_id")),
        AddIndexOnline(model_name="requestlog", index=_time("reqlog_user_time_idx", "user_id")),
        AddIndexOnline(
            model_name="requestlog", index=_time("reqlog_errors_idx", condition=models.Q(("status__gte", 400)))
        ),
        AddIndexOnline(
            model_name="requestlog",
            index=_time("reqlog_fallback_time_idx", condition=models.Q(("fallback_triggered", True))),
        ),
        AddIndexOnline(
            model_name="requestlog", index=_time("reqlog_chain_step_idx", condition=models.Q(("chain_step__gt", 0)))
        ),
        RemoveIndexOnline(model_name="requestlog", name="reqlog_served_idx"),
        RemoveIndexOnline(model_name="requestlog", name="reqlog_status_idx"),
        RemoveIndexOnline(model_name="requestlog", name="reqlog_fallback_idx"),
        RemoveIndexOnline(model_name="requestlog", name="reqlog_user_idx"),
        migrations.RunPython(drop_request_id_like_index, migrations.RunPython.noop, elidable=True),
    ]
