"""RFC 6902 JSON Patches applied to a stored state without copying it whole.

`jsonpatch` (a maintained implementation of the RFC) does the work, one operation at a time so a failure names
its operation. The parent state comes from the store's cache, shared and read-only: before an operation changes
a container, the containers on its path are copied (shallow), so the new state shares every untouched subtree
with the parent and a patch costs what it changes, not a deep copy of a 2 MB state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonpatch
import jsonpointer

_MUTATING = {"add": ("path",), "remove": ("path",), "replace": ("path",), "move": ("from", "path"), "copy": ("path",)}


class PatchFailed(ValueError):
    """Operation `index` of a patch does not apply to its base (or is malformed)."""

    def __init__(self, index: int, operation: Any, reason: str) -> None:
        op = operation.get("op") if isinstance(operation, dict) else None
        path = operation.get("path") if isinstance(operation, dict) else None
        super().__init__(f"operation {index} ({op} {path!r}) does not apply: {reason}")
        self.index = index


def apply_patch(state: Any, operations: Sequence[dict[str, Any]]) -> Any:
    """`state` (left unchanged) with `operations` applied; raises PatchFailed naming the first that fails."""
    copied: dict[int, Any] = {}  # the containers this call made (by id, held so no id is reused): its to change
    document = state
    for index, operation in enumerate(operations):
        try:
            patch = jsonpatch.JsonPatch([operation])
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
        ) as exc:  # a pointer into a scalar, a bad index
            raise PatchFailed(index, operation, f"{type(exc).__name__}: {exc}") from None
    return document


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
