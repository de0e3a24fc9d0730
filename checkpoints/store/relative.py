"""A checkpoint's state read relative to one the reader holds (issue #23 item 3, the plain API).

The reader names its base by checkpoint id and by the `state_tag` it was served with; the answer carries RFC 6902
operations turning exactly that state into the one asked for, so the reader parses what changed. A tag names what
this reader was shown: the content root for a token that reads states as they are, a digest of the masked JSON
for one that reads them masked (never the root: it would let a reader confirm a guess of the unmasked state). A
base served otherwise (another token's view, a state rewritten by a purge since) has another tag and gets the
whole state, so a patch is never applied to a state it was not made against.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from . import diff, jsoncodec, load_shared, load_state_json
from .masking import Masker

# A patch this small is sent without encoding the whole state to compare sizes (the client's rule too).
SMALL_PATCH = 64 * 1024


def tag(root: bytes, masked: Any, shown: Masker) -> str:
    """The `state_tag` of the state under `root` as `shown` shows it (`masked`: that state, when masked)."""
    if not shown.active:
        return root.hex()
    return hashlib.sha256(b"masked\0" + jsoncodec.canonical(masked)).hexdigest()


def relative_read(
    data: dict[str, Any], root: bytes, base: tuple[int, bytes], base_tag: str | None, shown: Masker
) -> dict[str, Any]:
    """`data` (a checkpoint as the API shows it) with `state_patch` and `base` against the state under `base_root`
    when `base_tag` is the tag that state has for this reader and the patch is smaller; else with the whole state.
    `base` is (checkpoint id, root) of a checkpoint the caller checked is the token's project's."""
    base_id, base_root = base
    state = shown(load_shared(root)) if shown.active else load_shared(root)
    held = shown(load_shared(base_root)) if shown.active else load_shared(base_root)
    data["state_tag"] = tag(root, state, shown)
    if base_tag is not None and base_tag == tag(base_root, held, shown):
        operations = diff.json_patch(held, state)
        encoded = jsoncodec.dumps(operations)
        if len(encoded) <= SMALL_PATCH or len(encoded) < len(_encoded(root, state, shown)):
            data.update(base={"id": base_id, "tag": base_tag}, state_patch=orjson.Fragment(encoded))
            return data
    data["state"] = orjson.Fragment(_encoded(root, state, shown))
    return data


def _encoded(root: bytes, state: Any, shown: Masker) -> bytes:
    return jsoncodec.canonical(state) if shown.active else load_state_json(root)
