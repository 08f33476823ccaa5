from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_actor_plain_id"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.UniqueConstraint(fields=("prev_hash",), name="audit_prev_hash_unique"),
        ),
    ]
