"""Checkpoints imported from Kaizen before true parents get their real parents, as an import now gives them.

The importer used to chain each agent's checkpoints one after another in step order, so a second run
under the same agent id, a fork inside the agent and a run resumed from an older checkpoint were
flattened. Their Kaizen ids stayed in metadata (`source_id`, `parent_checkpoint_id`), so, session by
session, in Kaizen's own order (timestamp):

* a checkpoint whose `parent_checkpoint_id` is an earlier checkpoint of the session hangs under it;
* one without (Kaizen's own agent loop sets none; retention deletes the oldest parents; a fork's
  source is in another session) continues the Kaizen checkpoint before it, unless its step counter
  went back — a new run under the same agent id — which makes it a new root;
* the first in that order without one is a root; checkpoints made in the console keep their parent.

`starts_branch` is set as services set it: the parent is not the checkpoint just before it (the
previous surviving one: a gap left by retention is no branch). Only rows that change are written, in
batches of BATCH by primary key, each batch its own short transaction: writers are never held up long.
"""

from collections import namedtuple
from datetime import UTC, datetime

from django.db import migrations, transaction

BATCH = 2000
NO_TIME = datetime.min.replace(tzinfo=UTC)


def kaizen_sessions(Checkpoint):
    """The sessions holding Kaizen checkpoints, found by walking the table in primary-key batches."""
    sessions, last = set(), 0
    while True:
        rows = list(
            Checkpoint.objects.filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", "session_id", "metadata__source_format")[:BATCH]
        )
        if not rows:
            return sorted(sessions)
        last = rows[-1][0]
        sessions.update(session for _, session, source_format in rows if source_format == "kaizen")


Row = namedtuple("Row", "pk seq parent starts_branch created_at step source_format source_id parent_source")


def repointed(Checkpoint, session):
    """The rows of one session whose parent or branch mark changes: (pk, parent pk, starts_branch)."""
    rows = [
        Row(*values)
        for values in Checkpoint.objects.filter(session_id=session)
        .order_by("seq")
        .values_list(
            "pk", "seq", "parent_id", "starts_branch", "created_at", "step", "metadata__source_format",
            "metadata__source_id", "metadata__parent_checkpoint_id",
        )
    ]  # fmt: skip
    seq_of = {row.pk: row.seq for row in rows}
    before = {row.seq: previous.seq for previous, row in zip(rows, rows[1:], strict=False)}  # the previous survivor
    kaizen = [row for row in rows if row.source_format == "kaizen"]
    by_source = {row.source_id: row for row in kaizen if row.source_id}
    kaizen.sort(key=lambda row: (row.created_at or NO_TIME, row.step if row.step is not None else -1, row.seq))
    changed, previous = [], None
    for row in kaizen:
        parent = row.parent
        named = by_source.get(row.parent_source)
        if named is not None and named.seq < row.seq:
            parent = named.pk
        elif previous is None or (None not in (row.step, previous.step) and row.step < previous.step):
            parent = None
        elif previous.seq < row.seq:
            parent = previous.pk
        branch = row.seq in before if parent is None else seq_of[parent] != before.get(row.seq)
        if (parent, branch) != (row.parent, row.starts_branch):
            changed.append((row.pk, parent, branch))
        previous = row
    return changed


def repoint_kaizen_checkpoints(apps, schema_editor):
    Checkpoint = apps.get_model("checkpoints", "Checkpoint")
    for session in kaizen_sessions(Checkpoint):
        changed = sorted(repointed(Checkpoint, session))
        for start in range(0, len(changed), BATCH):
            rows = [
                Checkpoint(pk=pk, parent_id=parent, starts_branch=branch)
                for pk, parent, branch in changed[start : start + BATCH]
            ]
            with transaction.atomic():
                Checkpoint.objects.bulk_update(rows, ["parent", "starts_branch"])


class Migration(migrations.Migration):
    atomic = False  # each batch commits on its own

    dependencies = [
        ("checkpoints", "0013_tree_parents"),
    ]

    operations = [
        migrations.RunPython(repoint_kaizen_checkpoints, migrations.RunPython.noop, elidable=True),
    ]
