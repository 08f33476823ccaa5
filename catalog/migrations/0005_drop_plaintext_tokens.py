from django.db import migrations


class Migration(migrations.Migration):
    """Tokens now live hashed in ConsoleToken; drop DRF authtoken's plaintext table if an older
    installation created it (the authtoken app is no longer installed)."""

    dependencies = [("catalog", "0004_consoletoken")]

    operations = [migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token", migrations.RunSQL.noop)]
