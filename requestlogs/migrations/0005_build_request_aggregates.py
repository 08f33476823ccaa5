"""Build the request aggregates from the request logs already stored (ingest keeps them from here on).

It calls the same rebuild the benchmark uses (`requestlogs.services.request_aggregates_rebuild`): one
INSERT ... SELECT per table. Should a later migration change the aggregate tables, it rebuilds them again.
"""

from django.db import migrations


def build(apps, schema_editor):
    from requestlogs.services import request_aggregates_rebuild

    if not apps.get_model("requestlogs", "RequestLog").objects.using(schema_editor.connection.alias).exists():
        return  # a fresh database: nothing to count (and the current tables need not match these columns)
    request_aggregates_rebuild(using=schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("requestlogs", "0004_request_aggregates"),
    ]

    operations = [
        migrations.RunPython(build, migrations.RunPython.noop, elidable=True),
    ]
