"""The LangGraph saver's API (`/api/v1/langgraph/`): what `checkpoint_console.langgraph.ConsoleSaver` calls.

Thread ids travel in bodies, never in paths: LangGraph accepts any string, "/" included, and up to 1,000 characters
of it percent-encode past the request line a server or proxy takes. The GET forms of get_tuple and list (query
parameters) stay for short ids and older savers; their POST forms are what ConsoleSaver sends.
Values are typed JSON (`checkpoint_console.typedjson`). 409 with `"resend": true` asks the saver to send every
channel whole; 410 refuses a checkpoint of a deleted thread's history.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router
from ninja.errors import HttpError

from .. import limits
from ..services import langgraph as lg
from ..store import jsoncodec
from .common import ERRORS, WRITE, Detail, Strict, _actor, _json, _reader, _token

router = Router(tags=["langgraph"])
LG_ERRORS = {**ERRORS, 410: Detail}

ThreadId = Field(min_length=1, max_length=lg.THREAD_MAX, description="LangGraph's thread_id: any string.")
Namespace = Field(default="", max_length=lg.NS_MAX)


class PutIn(Strict):
    thread_id: str = ThreadId
    checkpoint_ns: str = Namespace
    parent_checkpoint_id: str | None = Field(default=None, max_length=lg.ID_MAX)
    checkpoint: dict[str, Any] = Field(description="LangGraph's checkpoint without channel_values, as typed JSON.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Typed JSON.")
    channels: list[str] | None = Field(
        default=None, description="Every channel of the state; null: exactly those in values and appends."
    )
    values: dict[str, Any] = Field(default_factory=dict, description="Channels sent whole, as typed JSON.")
    appends: dict[str, Any] = Field(
        default_factory=dict, description='List channels extended: {"base_len": n, "items": [typed JSON, …]}.'
    )
    base_checkpoint_id: str | None = Field(
        default=None, max_length=lg.ID_MAX, description="What omitted channels and appends resolve against."
    )


class PutOut(Strict):
    checkpoint_id: str
    checkpoint_ns: str
    thread_id: str
    id: int
    seq: int


class WritesIn(Strict):
    thread_id: str = ThreadId
    checkpoint_ns: str = Namespace
    checkpoint_id: str = Field(min_length=1, max_length=lg.ID_MAX)
    task_id: str = Field(min_length=1, max_length=lg.ID_MAX)
    task_path: str = Field(default="", max_length=lg.NS_MAX)
    writes: list[tuple[str, Any]] = Field(max_length=10_000, description="[channel, typed JSON] pairs.")


class WritesOut(Strict):
    stored: int


class TuplePage(Strict):
    items: list[dict[str, Any]]
    next_cursor: str | None


@router.post("/checkpoints", response={201: PutOut, **LG_ERRORS}, auth=WRITE)
def put_checkpoint(request: HttpRequest, payload: PutIn) -> Any:
    """LangGraph's put: channels left out of `values` come from the base checkpoint's state."""
    item = lg.PutInput(**payload.model_dump())
    checkpoint, _ = lg.put_checkpoint(_token(request).project, item, actor=_actor(request))
    return _json(
        {
            "checkpoint_id": item.checkpoint["id"],
            "checkpoint_ns": item.checkpoint_ns,
            "thread_id": item.thread_id,
            "id": checkpoint.pk,
            "seq": checkpoint.seq,
        },
        status=201,
    )


@router.post("/writes", response={200: WritesOut, **LG_ERRORS}, auth=WRITE)
def put_writes(request: HttpRequest, payload: WritesIn) -> Any:
    """LangGraph's put_writes: a task's pending writes against a checkpoint."""
    stored = lg.put_writes(_token(request).project, actor=_actor(request), **payload.model_dump())
    return {"stored": stored}


class PendingResumeIn(Strict):
    thread_id: str = ThreadId


class PendingResumeOut(Strict):
    resume: dict[str, Any] | None = Field(
        description="interrupt id → answer (typed JSON) for the answers the graph has not taken yet; null: none."
    )


@router.post("/resume", response={200: PendingResumeOut, **LG_ERRORS})
def pending_resume(request: HttpRequest, payload: PendingResumeIn) -> Any:
    """What `ConsoleSaver.pending_resume` turns into `Command(resume=…)`: the answers people gave to the thread's
    interrupts in the console (or through `/sessions/{id}/interrupts/{id}/answer`) that the graph has not taken."""
    return {"resume": lg.pending_resume(_token(request).project, thread_id=payload.thread_id) or None}


BaseId = Field(
    default=None,
    ge=1,
    le=limits.INT64_MAX,
    description=(
        "The console id (`console.id`) of a tuple the reader holds decoded: channels come as `channel_patch` "
        "against it (`same`, `lists` {keep, items}, `values`) when it is a checkpoint of the token's project."
    ),
)


class GetIn(Strict):
    thread_id: str = ThreadId
    checkpoint_ns: str = Namespace
    checkpoint_id: str | None = Field(default=None, max_length=lg.ID_MAX)
    base: int | None = BaseId


class ListIn(Strict):
    thread_id: str | None = Field(default=None, min_length=1, max_length=lg.THREAD_MAX)
    checkpoint_ns: str | None = Field(default=None, max_length=lg.NS_MAX)
    checkpoint_id: str | None = Field(default=None, max_length=lg.ID_MAX)
    before: str | None = Field(default=None, max_length=lg.ID_MAX, description="A checkpoint id: only smaller ones.")
    filter: dict[str, Any] | None = Field(default=None, description="Metadata key → typed JSON.")
    limit: int | None = Field(default=None, ge=1, le=limits.INT32_MAX, description="At most this many in all pages.")
    cursor: str | None = Field(default=None, max_length=1000, description="next_cursor of the previous page")
    relative: bool = Field(
        default=False, description="Each tuple's channels as a `channel_patch` against the tuple before it."
    )
    base: int | None = BaseId


@router.get("/checkpoint", response={200: dict[str, Any], **LG_ERRORS})
def get_tuple(
    request: HttpRequest,
    thread_id: str = Query(..., min_length=1, max_length=lg.THREAD_MAX),
    checkpoint_ns: str = Query("", max_length=lg.NS_MAX),
    checkpoint_id: str | None = Query(None, max_length=lg.ID_MAX),
) -> Any:
    """LangGraph's get_tuple: the checkpoint named, or the thread+namespace's latest; 404 when there is none.
    POST /checkpoint/get takes the same in a body, for ids too long for a URL."""
    return _get_tuple(request, GetIn(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id))


@router.post("/checkpoint/get", response={200: dict[str, Any], **LG_ERRORS})
def get_tuple_by_body(request: HttpRequest, payload: GetIn) -> Any:
    """LangGraph's get_tuple with its arguments in the body: a thread id of 1,000 four-byte characters is 12,000
    bytes percent-encoded, past the request line a server or proxy takes (gunicorn: 4,094 bytes)."""
    return _get_tuple(request, payload)


def _get_tuple(request: HttpRequest, wanted: GetIn) -> Any:
    found = lg.get_tuple(_token(request).project, **wanted.model_dump())
    if found is None:
        raise HttpError(404, f"no checkpoint {wanted.checkpoint_id or '(latest)'} in thread {wanted.thread_id[:200]!r}")
    return _json(_reader(request).json(found))


@router.get("/checkpoints", response={200: TuplePage, **LG_ERRORS})
def list_tuples(
    request: HttpRequest,
    thread_id: str | None = Query(None, min_length=1, max_length=lg.THREAD_MAX),
    checkpoint_ns: str | None = Query(None, max_length=lg.NS_MAX),
    checkpoint_id: str | None = Query(None, max_length=lg.ID_MAX),
    before: str | None = Query(None, max_length=lg.ID_MAX, description="A checkpoint id: only smaller ones."),
    filter: str | None = Query(None, max_length=2000, description="JSON object: metadata key → typed JSON."),  # noqa: A002
    limit: int | None = Query(None, ge=1, le=limits.INT32_MAX, description="At most this many in all pages."),
    cursor: str | None = Query(None, max_length=1000, description="next_cursor of the previous page"),
) -> Any:
    """LangGraph's list: newest id first, pages of up to 20. POST /checkpoints/list takes the same in a body."""
    wanted = ListIn(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        before=before,
        filter=_read_filter(filter),
        limit=limit,
        cursor=cursor,
    )
    return _list_tuples(request, wanted)


@router.post("/checkpoints/list", response={200: TuplePage, **LG_ERRORS})
def list_tuples_by_body(request: HttpRequest, payload: ListIn) -> Any:
    """LangGraph's list with its arguments in the body (`filter` a JSON object): what ConsoleSaver sends."""
    return _list_tuples(request, payload)


def _list_tuples(request: HttpRequest, wanted: ListIn) -> Any:
    after, remaining = _read_cursor(wanted.cursor) if wanted.cursor else (None, wanted.limit)
    page = lg.PAGE if remaining is None else min(lg.PAGE, remaining)
    items = list(
        lg.iter_tuples(
            _token(request).project,
            thread_id=wanted.thread_id,
            checkpoint_ns=wanted.checkpoint_ns,
            checkpoint_id=wanted.checkpoint_id,
            before=wanted.before,
            filter=wanted.filter,
            limit=page,
            after=after,
        )
    )
    if wanted.relative:
        items = list(lg.relative_tuples(_token(request).project, items, wanted.base))
    left = None if remaining is None else remaining - len(items)
    next_cursor = None
    if len(items) == page and left != 0:
        last = items[-1]
        next_cursor = _write_cursor((last["checkpoint_id"], last["console"]["id"]), left)
    # masked after `relative`: a read-only reader's base is masked too, and masking keeps equal values equal
    return _json({"items": _reader(request).json(items), "next_cursor": next_cursor})


class ThreadIn(Strict):
    thread_id: str = ThreadId


class CopyIn(Strict):
    source_thread_id: str = ThreadId
    target_thread_id: str = ThreadId


class RunsIn(Strict):
    run_ids: list[Annotated[str, Field(max_length=lg.ID_MAX)]] = Field(max_length=10_000)


class PruneIn(Strict):
    thread_ids: list[Annotated[str, Field(min_length=1, max_length=lg.THREAD_MAX)]] = Field(max_length=10_000)
    strategy: Literal["keep_latest", "delete"] = "keep_latest"


class DeletedOut(Strict):
    deleted_checkpoints: int
    deleted_writes: int


class CopiedOut(Strict):
    copied_checkpoints: int
    copied_writes: int


def _deleted(counts: tuple[int, int]) -> dict[str, int]:
    return {"deleted_checkpoints": counts[0], "deleted_writes": counts[1]}


@router.post("/threads/delete", response={200: DeletedOut, **LG_ERRORS}, auth=WRITE)
def delete_thread(request: HttpRequest, payload: ThreadIn) -> Any:
    """LangGraph's delete_thread: every checkpoint and write of the thread goes, audited; a tombstone refuses late
    puts from the deleted history (410). An unknown thread deletes nothing."""
    return _deleted(lg.delete_thread(_token(request).project, actor=_actor(request), thread_id=payload.thread_id))


@router.post("/threads/copy", response={200: CopiedOut, **LG_ERRORS}, auth=WRITE)
def copy_thread(request: HttpRequest, payload: CopyIn) -> Any:
    """LangGraph's copy_thread: every checkpoint, namespace and write, same ids, states shared (nothing stored)."""
    copied, writes = lg.copy_thread(_token(request).project, actor=_actor(request), **payload.model_dump())
    return {"copied_checkpoints": copied, "copied_writes": writes}


@router.post("/runs/delete", response={200: DeletedOut, **LG_ERRORS}, auth=WRITE)
def delete_for_runs(request: HttpRequest, payload: RunsIn) -> Any:
    """LangGraph's delete_for_runs: the checkpoints whose metadata run_id is listed, with their writes."""
    return _deleted(lg.delete_for_runs(_token(request).project, actor=_actor(request), run_ids=payload.run_ids))


@router.post("/threads/prune", response={200: DeletedOut, **LG_ERRORS}, auth=WRITE)
def prune(request: HttpRequest, payload: PruneIn) -> Any:
    """LangGraph's prune: keep_latest keeps each namespace's latest checkpoint; delete deletes the threads."""
    return _deleted(lg.prune(_token(request).project, actor=_actor(request), **payload.model_dump()))


def _read_filter(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        wanted = jsoncodec.loads(text.encode())
    except jsoncodec.InvalidJSON as exc:
        raise HttpError(422, f"filter: not JSON: {exc}") from None
    if not isinstance(wanted, dict):
        raise HttpError(422, "filter: must be a JSON object of metadata key → value")
    return wanted


def _write_cursor(after: tuple[str, int], remaining: int | None) -> str:
    return base64.urlsafe_b64encode(jsoncodec.dumps([*after, remaining])).decode("ascii")


def _read_cursor(cursor: str) -> tuple[tuple[str, int], int | None]:
    try:
        checkpoint_id, pk, remaining = jsoncodec.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        if isinstance(checkpoint_id, str) and type(pk) is int and (remaining is None or type(remaining) is int):
            return (checkpoint_id, pk), remaining
    except (ValueError, TypeError, UnicodeError, binascii.Error, jsoncodec.InvalidJSON):
        pass
    raise HttpError(400, "cursor is not one this API returned")
