"""Bytes per checkpoint (#23 item 4): fewer index entries per checkpoint, chunks of up to 8 kB kept in their row.

* Step checkpoints leave `checkpoint_session_kind`: every query of that index names a kind other than `step` (a
  session's newest reset, its recovery checkpoints, the API's kind filter for those); steps are most rows, and a
  session's steps are read through `checkpoint_seq_per_session`, skipping the others.
* `chunk_created` goes: garbage collection pages through chunks by hash (the primary key) and tests their age on
  the row; only the admin's chunk list sorted by it (it now sorts by hash).
* On PostgreSQL, a chunk's data is kept in its row up to 8,160 bytes (`toast_tuple_target`), where TOAST cut
  anything over ~2 kB into 2 kB pieces in another table with an index of its own, and it is stored as is
  (`STORAGE EXTERNAL`): zstd frames do not compress, so PostgreSQL's own compression only cost time. Rows stored
  before keep their layout; both read the same.

Indexes are built and dropped CONCURRENTLY on PostgreSQL (writers go on), hence non-atomic.
"""

from django.db import migrations, models

from ._indexes import index_change

OLD_KIND_INDEX = models.Index(fields=["session", "kind", "seq"], name="checkpoint_session_kind")
NEW_KIND_INDEX = models.Index(
    fields=["session", "kind", "seq"], condition=~models.Q(kind="step"), name="checkpoint_session_kind"
)
CHUNK_CREATED = models.Index(fields=["created_at"], name="chunk_created")


def _chunk_storage(target: int, storage: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            table = schema_editor.quote_name(apps.get_model("checkpoints", "Chunk")._meta.db_table)
            schema_editor.execute(f"ALTER TABLE {table} SET (toast_tuple_target = {target})")
            schema_editor.execute(f"ALTER TABLE {table} ALTER COLUMN data SET STORAGE {storage}")

    return run


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0038_fleet_recoveries"),
    ]

    operations = [
        index_change("Checkpoint", OLD_KIND_INDEX, NEW_KIND_INDEX),
        index_change("Chunk", CHUNK_CREATED, None),
        # 2032 and EXTENDED are PostgreSQL's defaults
        migrations.RunPython(_chunk_storage(8160, "EXTERNAL"), _chunk_storage(2032, "EXTENDED")),
    ]
