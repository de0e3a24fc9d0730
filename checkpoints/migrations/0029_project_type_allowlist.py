"""Each project's allow-list of the types LangGraph values stored in it may name (checkpoints.models.type_allowed):
existing projects start from the default, what LangGraph's serializer rebuilds without being told."""

import checkpoints.models
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0028_state_hash_by_part")]

    operations = [
        migrations.AddField(
            model_name="project",
            name="type_allowlist",
            field=models.JSONField(
                blank=True,
                default=checkpoints.models.default_type_allowlist,
                help_text="Types LangGraph values may name (module.Name, or a prefix ending in '.'); operators "
                "edit it under Project settings.",
            ),
        ),
    ]
