from __future__ import annotations

from django.db import migrations

from checkpoints.roles import ROLES, repair_roles_in_migration


def create_roles(apps, schema_editor):
    repair_roles_in_migration(apps)


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0003_permissions"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_roles, remove_roles)]
