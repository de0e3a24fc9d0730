"""The Apprise channel's label names the services the console now sends to (Teams is no longer one of them).
Choices only: no change in the database."""

from django.db import migrations, models

CHANNELS = [
    ("webhook", "signed webhook"),
    ("slack", "Slack-compatible incoming webhook"),
    ("email", "email"),
    ("apprise", "Apprise URL (Discord, Telegram, ntfy, JSON, XML, form)"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0029_project_type_allowlist"),
    ]

    operations = [
        migrations.AlterField(model_name=model, name="channel", field=models.CharField(choices=CHANNELS, max_length=20))
        for model in ("delivery", "notificationrule")
    ]
