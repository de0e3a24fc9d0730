"""RFC 6902 JSON Patches applied to a stored state without copying it whole.

`jsonpatch` (a maintained implementation of the RFC) does the work, one operation at a time so a failure names
its operation. The parent state comes from the store's cache, shared and read-only: before an operation changes
a container, the containers on its path are copied (shallow), so the new state shares every untouched subtree
with the parent and a patch costs what it changes, not a deep copy of a 2 MB state.

What a patch may make the server do is bounded by what a body could carry (`max_work`, by default
CHECKPOINT_MAX_BODY_BYTES): a small body must not buy large work. Two costs are not proportional to the body and are
counted before each operation runs: what `copy` duplicates (a deep copy: `copy` of "" into the document doubles it
at each operation) and the items a list insertion or removal shifts (an `add` at `/list/0` of a million-item list
moves a million pointers). `test` compares against a value the body holds, and paths and values are the body's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonpatch
import jsonpointer
from django.conf import settings

_MUTATING = {"add": ("path",), "remove": ("path",), "replace": ("path",), "move": ("from", "path"), "copy": ("path",)}


class PatchFailed(ValueError):
    """Operation `index` of a patch does not apply to its base (or is malformed, or costs too much)."""

    def __init__(self, index: int, operation: Any, reason: str) -> None:
        op = operation.get("op") if isinstance(operation, dict) else None
        path = operation.get("path") if isinstance(operation, dict) else None
        super().__init__(f"operation {index} ({op} {path!r}) does not apply: {reason}")
        self.index = index


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.copied = 0  # bytes (about: JSON's encoding) `copy` operations duplicated
        self.shifted = 0  # list items moved by insertions and removals

    def charge(self, document: Any, operation: dict[str, Any]) -> None:
        op = operation.get("op")
        if op in ("add", "remove", "move"):
            self.shifted += _shifted(document, str(operation.get("path", "")), removing=op == "remove")
        if op == "move":
            self.shifted += _shifted(document, str(operation.get("from", "")), removing=True)
        if self.shifted > self.limit:
            raise ValueError(
                f"the patch shifts more than {self.limit:,} list items (insertions and removals before the end of "
                "long lists); send the whole state instead"
            )
        if op == "copy" and isinstance(operation.get("from"), str):
            found = _resolve(document, operation["from"])
            if found is not None:
                self.copied += _weight(found, self.limit - self.copied)
            if self.copied > self.limit:
                raise ValueError(f"the patch copies more than {self.limit:,} bytes; send the whole state instead")


def apply_patch(state: Any, operations: Sequence[dict[str, Any]], *, max_work: int | None = None) -> Any:
    """`state` (left unchanged) with `operations` applied; raises PatchFailed naming the first that fails, or the
    first past the work `max_work` allows (bytes copied, list items shifted)."""
    budget = _Budget(max_work if max_work is not None else settings.CHECKPOINT_MAX_BODY_BYTES)
    copied: dict[int, Any] = {}  # the containers this call made (by id, held so no id is reused): its to change
    document = state
    for index, operation in enumerate(operations):
        try:
            patch = jsonpatch.JsonPatch([operation])
            budget.charge(document, operation)
            for key in _MUTATING.get(str(operation.get("op")), ()):
                document = _copy_path(document, str(operation.get(key, "")), copied)
            document = patch.apply(document, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            raise PatchFailed(index, operation, str(exc)) from None
        except (
            TypeError,
            ValueError,
            KeyError,
            IndexError,
            AttributeError,
        ) as exc:  # a pointer into a scalar, a bad index, over the budget
            reason = str(exc) if type(exc) is ValueError else f"{type(exc).__name__}: {exc}"
            raise PatchFailed(index, operation, reason) from None
    return document


def _parent(document: Any, pointer: str) -> tuple[Any, str] | None:
    """The container holding `pointer`'s target and the last token, or None where the pointer leaves the document
    (jsonpatch then reports the operation)."""
    tokens = jsonpointer.JsonPointer(pointer).parts
    if not tokens:
        return None
    node = document
    for token in tokens[:-1]:
        node = _child(node, token)
        if node is None:
            return None
    return node, tokens[-1]


def _child(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        return node.get(token)
    if isinstance(node, list) and token.isascii() and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    return None


def _resolve(document: Any, pointer: str) -> Any:
    found = _parent(document, pointer)
    return document if found is None and pointer == "" else _child(*found) if found is not None else None


def _shifted(document: Any, pointer: str, *, removing: bool) -> int:
    """How many list items an insertion (or removal) at `pointer` moves: those after it."""
    found = _parent(document, pointer)
    if found is None or not isinstance(found[0], list) or not (found[1].isascii() and found[1].isdigit()):
        return 0
    return max(len(found[0]) - int(found[1]) - (1 if removing else 0), 0)


def _weight(value: Any, limit: int) -> int:
    """About the bytes of `value`'s JSON, counted until past `limit` (a copy past the budget is not walked whole)."""
    total, stack = 0, [value]
    while stack and total <= limit:
        node = stack.pop()
        if isinstance(node, dict):
            total += 2 + sum(len(key) + 4 for key in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            total += 2 + len(node)
            stack.extend(node)
        elif isinstance(node, str):
            total += len(node) + 2
        else:
            total += 8
    return total


def _copy_path(document: Any, pointer: str, copied: dict[int, Any]) -> Any:
    """`document` with every container from the root to the parent of `pointer`'s target copied (once a call):
    what an operation at `pointer` changes in place is then this call's own. Stops where the pointer leaves the
    document; jsonpatch then reports the operation."""
    tokens = jsonpointer.JsonPointer(pointer).parts
    if not tokens:
        return document
    document = _own(document, copied)
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            key: Any = token
        elif isinstance(node, list) and token.isascii() and token.isdigit() and int(token) < len(node):
            key = int(token)
        else:
            break
        child = node[key]
        if not isinstance(child, dict | list):
            break
        node[key] = node = _own(child, copied)
    return document


def _own(container: Any, copied: dict[int, Any]) -> Any:
    if not isinstance(container, dict | list) or id(container) in copied:
        return container
    copy = container.copy()
    copied[id(copy)] = copy
    return copy
