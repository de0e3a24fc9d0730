from __future__ import annotations

from django.db import migrations

from ._roles import remove_roles, repair_roles


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0003_permissions"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(repair_roles, remove_roles)]
