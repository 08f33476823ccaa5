import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """Make the actor a plain id: drop the foreign key constraint, keep the column and its values.

    The values are part of each event's hash, so they must survive untouched.
    """

    dependencies = [
        ("audit", "0002_append_only_trigger"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="actor",
            field=models.ForeignKey(
                db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="auditevent", name="actor"),
                migrations.AddField(model_name="auditevent", name="actor_id", field=models.BigIntegerField(null=True)),
            ],
            database_operations=[],
        ),
    ]
