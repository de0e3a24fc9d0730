"""Bytes per checkpoint (#23): name search leaves the checkpoint rows; unnamed checkpoints leave the name index.

* The admin's name search (`models.name_contains`) finds names among the sessions' name tallies (SessionCount,
  a few rows a session) through a pg_trgm index there, then the checkpoints through `checkpoint_session_name`:
  `checkpoint_name_trigram`, an entry per trigram of every checkpoint's name, goes.
* `checkpoint_session_name` keeps named checkpoints only (every query of it names a name).

Indexes are built and dropped CONCURRENTLY on PostgreSQL (writers go on), hence non-atomic; elsewhere the
schema editor does it.
"""

from django.db import migrations, models

from ._indexes import index_change
from ._trigram import trigram_indexes, without_trigram_indexes

OLD_NAME_INDEX = models.Index(fields=["session", "name", "seq"], name="checkpoint_session_name")
NEW_NAME_INDEX = models.Index(
    fields=["session", "name", "seq"], condition=~models.Q(name=""), name="checkpoint_session_name"
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0036_checkpoint_row_slimmer"),
    ]

    operations = [
        trigram_indexes("checkpoints_sessioncount", {"value": "count_name_trigram"}, where="field = 'name'"),
        without_trigram_indexes("checkpoints_checkpoint", {"name": "checkpoint_name_trigram"}),
        index_change("Checkpoint", OLD_NAME_INDEX, NEW_NAME_INDEX),
    ]
