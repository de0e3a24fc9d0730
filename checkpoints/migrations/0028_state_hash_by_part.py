"""State digests by part (checkpoints.store.digests): a checkpoint's digest no longer needs the whole state
encoded and hashed, so a LangGraph put hashes only the channels and messages it adds.

Every stored checkpoint's state_hash is computed again under the new definition, so equal states keep equal
digests across the upgrade (drift's stalled detector, idempotent retries, the routine job's "nothing changed").
Session by session, one transaction each (hence a non-atomic migration), each root read and hashed once. A
state the store cannot read keeps its old digest.

The digest and the reader are frozen in _states_0028.py, so a later change to checkpoints.store never changes
what this migration computes (docs/decisions/0010-frozen-migrations.md).
"""

from django.db import connection, migrations, models, transaction

from . import _states_0028 as states


def rehash(apps, schema_editor):
    Checkpoint = apps.get_model("checkpoints", "Checkpoint")
    sessions = list(Checkpoint.objects.order_by("session_id").values_list("session_id", flat=True).distinct())
    for session_id in sessions:
        by_root = {}
        for pk, root in Checkpoint.objects.filter(session_id=session_id).order_by("seq").values_list("pk", "root"):
            by_root.setdefault(bytes(root), []).append(pk)
        changed = []
        with connection.cursor() as cursor:  # the default database, as the rows above
            for root, pks in by_root.items():
                try:
                    digest = states.state_digest(states.load_state(cursor, root))
                except states.Unreadable:
                    continue
                changed += [Checkpoint(pk=pk, state_hash=digest) for pk in pks]
        with transaction.atomic():
            Checkpoint.objects.bulk_update(changed, ["state_hash"], batch_size=500)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0027_detector_kinds"),
    ]

    operations = [
        migrations.AlterField(
            model_name="checkpoint",
            name="state_hash",
            field=models.BinaryField(
                help_text="Digest of the state (store.digests: by top-level value, lists by item).", max_length=32
            ),
        ),
        migrations.RunPython(rehash, migrations.RunPython.noop),
    ]
