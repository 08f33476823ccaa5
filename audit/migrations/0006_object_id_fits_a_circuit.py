from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0005_refuse_truncate"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="object_id",
            field=models.CharField(max_length=200),
        ),
    ]
