"""Which LangGraph nodes wrote a checkpoint and which run next, read from its header as LangGraph itself reads it.

The console has no graph, so it cannot call `prepare_next_tasks`; but LangGraph decides from data the checkpoint
carries. A node runs when one of its trigger channels is available (it has a value in the checkpoint) at a version
newer than the one the node last saw (`versions_seen[node][channel]`), and a graph built with StateGraph triggers
node N by the channel `branch:to:N` (`__start__` by `__start__`). `Send`s wait in the `__pregel_tasks` channel,
one task each. A loop step runs what its parent checkpoint had next (older LangGraph also listed the nodes in the
metadata's `writes`); without the parent's, the nodes whose `versions_seen` changed from the parent's ran.

Join edges (`add_edge([a, b], c)`) wait on a barrier the console cannot evaluate without the graph: their node is
left out of "next" until the step it runs in says it ran.
"""

from __future__ import annotations

from typing import Any

BRANCH = "branch:to:"
START = "__start__"
TASKS = "__pregel_tasks"
NOT_NODES = {"__interrupt__"}  # versions_seen keeps interrupt_before/after bookkeeping under this key
KEY = "langgraph_nodes"  # where the console keeps them, in the Checkpoint's metadata beside checkpoint_id


def is_internal(channel: Any) -> bool:
    """A channel LangGraph keeps for itself (`branch:to:*`, `__start__`, `__pregel_*`, …), not the graph's state."""
    return isinstance(channel, str) and channel.startswith(("branch:", "__"))


def _newer(version: Any, seen: Any) -> bool:
    if seen is None:
        return version is not None
    try:
        return bool(version > seen)
    except TypeError:
        return bool(version != seen)


def _seen(header: dict[str, Any] | None) -> dict[str, Any]:
    seen = header.get("versions_seen") if isinstance(header, dict) else None
    return seen if isinstance(seen, dict) else {}


def next_nodes(header: dict[str, Any], channels: Any) -> list[str]:
    """The nodes LangGraph runs in the step after this checkpoint (before its pending writes say which finished):
    those a `branch:to:*` or `__start__` channel triggers, then one per waiting `Send`. `channels`: the
    checkpoint's channel values, or just their names."""
    versions = header.get("channel_versions")
    if not isinstance(versions, dict):
        return []
    seen = _seen(header)
    found: list[str] = []
    for channel, version in versions.items():
        if not isinstance(channel, str) or channel not in channels:
            continue  # not available: an ephemeral trigger cleared after its node ran
        if channel.startswith(BRANCH):
            node = channel.removeprefix(BRANCH)
        elif channel == START:
            node = START
        else:
            continue
        node_seen = seen.get(node)
        if _newer(version, node_seen.get(channel) if isinstance(node_seen, dict) else None) and node not in found:
            found.append(node)
    sends = channels.get(TASKS) if isinstance(channels, dict) else None
    found.extend(node for node in map(_send_node, sends if isinstance(sends, list) else []) if node)
    return found


def _send_node(send: Any) -> str | None:
    """The node a Send in typed JSON goes to: `{"__lg__": ["ext", …], "v": [module, "Send", [node, arg]]}`."""
    packed = send.get("v") if isinstance(send, dict) else None
    if isinstance(packed, list) and len(packed) == 3 and packed[1] == "Send" and isinstance(packed[2], list):
        node = packed[2][0] if packed[2] else None
        return node if isinstance(node, str) else None
    return None


def ran_nodes(
    header: dict[str, Any],
    parent_header: dict[str, Any] | None,
    parent_next: list[str] | None,
    metadata: dict[str, Any],
) -> list[str] | None:
    """The nodes whose writes made this checkpoint (a Send's node once per Send); [] for an input or a fork
    (no node ran), None when the parent is unknown and the metadata does not say."""
    writes = metadata.get("writes")
    if isinstance(writes, dict) and writes:
        return [str(node) for node in writes]
    source = metadata.get("source")
    if source in ("input", "fork"):
        return []
    if source == "loop" and parent_next is not None:
        return [node for node in parent_next if isinstance(node, str)]
    if parent_header is None:
        return None
    before = _seen(parent_header)
    return [
        str(node)
        for node, versions in _seen(header).items()
        if node not in NOT_NODES and versions and versions != before.get(node)
    ]


def nodes_of(
    header: dict[str, Any],
    channels: Any,
    metadata: dict[str, Any],
    *,
    parent_header: dict[str, Any] | None = None,
    parent_nodes: Any = None,
) -> dict[str, Any]:
    """What the console keeps in a LangGraph checkpoint's metadata (`KEY`): {"ran": [...] or None, "next": [...]}.
    `parent_nodes`: the parent's own (None when it has none)."""
    parent_next = parent_nodes.get("next") if isinstance(parent_nodes, dict) else None
    return {
        "ran": ran_nodes(header, parent_header, parent_next if isinstance(parent_next, list) else None, metadata),
        "next": next_nodes(header, channels),
    }
