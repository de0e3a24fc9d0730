"""Mark the subgraph hops of the LangGraph threads already stored (services set them on new checkpoints).

A hop is a branch start that is no branch of the thread's path: a subgraph's checkpoint that starts a branch, or a
root-graph checkpoint that is its parent's first child (not a restore) after a subgraph's run. Only the branch
starts of LangGraph sessions are read (the partial index `checkpoint_branch_start`), one session at a time.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.models import Min, Q

BATCH = 2000
RESTORE = "restore"


def mark_hops(apps: Any, schema_editor: Any) -> None:
    Checkpoint = apps.get_model("checkpoints", "Checkpoint")
    AgentSession = apps.get_model("checkpoints", "AgentSession")
    for session_id in AgentSession.objects.filter(source_format="langgraph").values_list("pk", flat=True):
        starts = Checkpoint.objects.filter(session_id=session_id, starts_branch=True)
        hops = set(
            starts.exclude(metadata__checkpoint_ns="")
            .filter(metadata__has_key="checkpoint_ns")
            .values_list("pk", flat=True)
        )
        candidates = list(
            starts.filter(metadata__checkpoint_ns="", parent__isnull=False)
            .exclude(kind=RESTORE)
            .values_list("pk", "seq", "parent_id")
        )
        parents = {parent for _, _, parent in candidates}
        first_child = dict(
            Checkpoint.objects.filter(parent_id__in=parents)
            .exclude(kind=RESTORE)
            .order_by()
            .values("parent_id")
            .annotate(first=Min("seq"))
            .values_list("parent_id", "first")
        )
        hops |= {pk for pk, seq, parent in candidates if first_child.get(parent) == seq}
        ordered = sorted(hops)
        for at in range(0, len(ordered), BATCH):
            Checkpoint.objects.filter(pk__in=ordered[at : at + BATCH]).update(subgraph_hop=True)


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0034_admin_orderings"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="subgraph_hop",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="A branch start that is no branch of a LangGraph thread's path: a subgraph's checkpoint, "
                "or the root graph's checkpoint that continues its parent after a subgraph's run.",
            ),
        ),
        migrations.AddIndex(
            model_name="checkpoint",
            index=models.Index(
                condition=Q(("starts_branch", True), ("subgraph_hop", False)),
                fields=["session", "seq"],
                name="checkpoint_path_start",
            ),
        ),
        migrations.RunPython(mark_hops, migrations.RunPython.noop, elidable=True),
    ]
