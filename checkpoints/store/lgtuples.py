"""LangGraph's checkpoint tuples read from the rows beside a thread's checkpoints and their states.

`services.langgraph` answers the saver's get_tuple and list with them, and the LangGraph format's export writes
them to a SqliteSaver file. A pending write is stored whole, or as a reference into a state that holds it (see
`value_of`), so reading one may read a state.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

from django.db.models import Q

from ..models import AgentSession, LangGraphCheckpoint, LangGraphWrites, refused_types
from . import diff, jsoncodec, load_shared, prefetch

PAGE = 20


def tuples(rows: list[LangGraphCheckpoint]) -> list[dict[str, Any]]:
    """LangGraph's checkpoint tuples of `rows` (with `console` and `session` loaded), their writes in one query."""
    if not rows:
        return []
    wanted = Q()
    for row in rows:
        wanted |= Q(session_id=row.session_id, checkpoint_ns=row.checkpoint_ns, checkpoint_id=row.checkpoint_id)
    pending: dict[tuple[int, str, str], list[tuple[tuple[str, str, int], list[Any]]]] = {}  # sort key, write
    tasks = list(LangGraphWrites.objects.filter(wanted))
    prefetch([bytes(row.console.root) for row in rows] + [bytes(t.values_root) for t in tasks if t.values_root])
    for task in tasks:
        key = (task.session_id, task.checkpoint_ns, task.checkpoint_id)
        for idx, channel, value in written_values(task):
            pending.setdefault(key, []).append(((task.task_path, task.task_id, idx), [task.task_id, channel, value]))
    found = []
    for row in rows:
        writes = sorted(pending.get((row.session_id, row.checkpoint_ns, row.checkpoint_id), []), key=lambda w: w[0])
        found.append(tuple_of(row, [write for _, write in writes]))
    return found


def written_values(row: LangGraphWrites) -> list[tuple[int, str, Any]]:
    """A task's writes as (idx, channel, value), the values named by their place in a state read from it."""
    state = load_shared(bytes(row.values_root)) if row.values_root is not None else None
    return [(entry[0], entry[1], value_of(entry, state)) for entry in jsoncodec.unpack(row.writes)]


def value_of(entry: list[Any], state: Any) -> Any:
    """The value of a stored write: [idx, channel, value]; [idx, channel, None, positions] (null: the channel's
    whole value); [idx, channel, None, None, ops]: the channel's value changed by `ops`."""
    if len(entry) == 3:
        return entry[2]
    held, at = state[entry[1]], entry[3]
    if len(entry) == 5:
        return diff.apply_ops(held, entry[4])
    return held if at is None else [held[n] for n in at] if isinstance(at, list) else held[at]


def tuple_of(row: LangGraphCheckpoint, pending: list[list[Any]]) -> dict[str, Any]:
    session = row.session
    return {
        "thread_id": session.metadata.get("thread_id", session.external_id),
        "checkpoint_ns": row.checkpoint_ns,
        "checkpoint_id": row.checkpoint_id,
        "parent_checkpoint_id": row.parent_checkpoint_id or None,
        # the state is shared with the store's cache: read-only
        "checkpoint": {
            **jsoncodec.unpack(row.header),
            "id": row.checkpoint_id,
            "channel_values": load_shared(bytes(row.console.root)),
        },
        "metadata": row.metadata,
        "pending_writes": pending,
        "console": {"id": row.console_id, "seq": row.console.seq, "session": session.external_id},
    }


def relative(item: dict[str, Any], base_id: int, base: Any) -> dict[str, Any]:
    """`item` with its channel values as a `channel_patch` against `base` (the values of console checkpoint
    `base_id`, which the reader holds decoded): the channels unchanged, each list kept up to the length it shares
    with the base's and then extended, and the rest whole. What a reader decodes is then what changed (issue #23
    item 3). Unchanged means the same JSON: `1`, `1.0` and `true` are equal in Python and told apart here."""
    values = item["checkpoint"]["channel_values"]
    if not isinstance(values, dict) or not isinstance(base, dict):
        return item
    same: list[str] = []
    lists: dict[str, dict[str, Any]] = {}
    whole: dict[str, Any] = {}
    for channel, value in values.items():
        old = base.get(channel, _ABSENT)
        if old is not _ABSENT and _same(old, value):
            same.append(channel)
        elif type(value) is list and type(old) is list and (keep := _shared_prefix(old, value)):
            lists[channel] = {"keep": keep, "items": value[keep:]}
        else:
            whole[channel] = value
    header = {key: value for key, value in item["checkpoint"].items() if key != "channel_values"}
    patch = {"base": base_id, "same": same, "lists": lists, "values": whole}
    return {**item, "checkpoint": header, "channel_patch": patch}


_ABSENT = object()


def _same(old: Any, new: Any) -> bool:
    # States replayed from one another share their unchanged values, so identity settles most comparisons.
    return old is new or (
        type(old) is type(new) and old == new and jsoncodec.canonical(old) == jsoncodec.canonical(new)
    )


def _shared_prefix(old: list[Any], new: list[Any]) -> int:
    end = min(len(old), len(new))
    if all(map(operator.is_, old[:end], new[:end])):  # consecutive states share their items: one C-level pass
        return end
    keep = 0
    while keep < end and _same(old[keep], new[keep]):
        keep += 1
    return keep


def rows() -> Any:
    return (
        LangGraphCheckpoint.objects.filter(current=True)
        .select_related("session", "console")
        .only(
            "console_id",
            "session_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "header",
            "metadata",
            "console__root",
            "console__seq",
            "session__external_id",
            "session__metadata",
        )
    )


def session_tuples(session: AgentSession) -> Iterator[dict[str, Any]]:
    """Every current tuple of a thread, namespace by namespace in id order, read PAGE at a time."""
    batch: list[LangGraphCheckpoint] = []
    for row in rows().filter(session=session).order_by("checkpoint_ns", "checkpoint_id").iterator(chunk_size=PAGE):
        batch.append(row)
        if len(batch) == PAGE:
            yield from tuples(batch)
            batch = []
    yield from tuples(batch)


def refused_in(item: dict[str, Any], allowlist: list[str]) -> Iterator[tuple[str, str]]:
    """(path, dotted name) of each callable a tuple (header and values, metadata, pending writes) names that
    `allowlist` lacks: what a LangGraph saver reading it would import and the project does not allow."""
    for part in ("checkpoint", "metadata", "pending_writes"):
        yield from refused_types(allowlist, item[part], part)
