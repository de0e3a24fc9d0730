from __future__ import annotations

from django.db import migrations

from checkpoints.roles import ROLES, ensure_roles


def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes

    # Permissions are normally created after all migrations; the groups need them now.
    app_config = apps.get_app_config("checkpoints")
    app_config.models_module = True
    create_contenttypes(app_config, verbosity=0, apps=apps)
    create_permissions(app_config, verbosity=0, apps=apps)
    app_config.models_module = None
    ensure_roles(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0003_permissions"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_roles, remove_roles)]
