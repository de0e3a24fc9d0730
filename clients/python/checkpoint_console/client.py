"""A Python client for the Checkpoint Console API (`/api/v1/`).

Standard library only, so an agent can copy this one file into its own code base.
Method names follow the source systems (`create`, `get_latest`, `rollback_to`, `export`, …).

    client = CheckpointClient("https://console.example.com", "cpk_…")
    client.create_session("run-42", agent="planner")
    client.create("run-42", {"messages": []}, name="task_started")
    state = client.resume("run-42")["state"]

Patches: `create` remembers the last state it wrote to each session and sends only what changed (an RFC 6902
JSON Patch against that checkpoint), or the whole state when it holds none or the patch would not be smaller.
When an operator restored or undid meanwhile, the server refuses the patch and `create` raises `HeadMoved`:
the agent calls `resume()` and goes on from the state it returns (never over the operator's restore).

Reads: `get`, `get_latest` and `get_by_name` name the newest state the client read as a base; the server sends
what changed, the client parses that, patches its private copy and hands the caller a fresh copy of its own.

Retries: reads and the writes that are safe to repeat are sent again after a 503 (also 429, 502, 504) or a
lost connection, up to `retries` times, waiting the server's Retry-After or an exponential backoff with jitter.
Every checkpoint write carries an idempotency key (one is made when none is given), the same on each retry,
so a checkpoint whose answer was lost is stored once. `rollback_to`, `fork` and `add_phase_output` have no key
on the server: they are sent again only when the connection was refused, i.e. the request never arrived.
"""

from __future__ import annotations

import builtins
import email.utils
import hashlib
import http.client
import json
import marshal
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

__all__ = ["CheckpointAPIError", "CheckpointClient", "HeadMoved", "json_patch"]

JSONDict = dict[str, Any]
JSONList = list[JSONDict]
When = datetime | str

# The batch endpoint takes up to 10,000 checkpoints and 16 MB per request; stay well below both.
_BATCH_ITEMS = 500
_BATCH_BYTES = 8 * 1024 * 1024
_TIME_FIELDS = ("since", "until", "created_at")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is refused, and the 3xx raised as an error naming where it pointed: urllib would send the request,
    Authorization header and all, to whatever host the Location names (a proxy, a hijacked name, a typo'd
    base_url redirecting to another site would receive the project's token)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)

_RETRY_STATUSES = frozenset({429, 502, 503, 504})  # "not now": the request was not carried out, or may be repeated


class CheckpointAPIError(Exception):
    """The API refused a request (`status` 4xx/5xx), or could not be reached (`status` 0).

    `detail` is the server's own explanation: a string, or a list of field errors.
    """

    def __init__(self, status: int, detail: Any, *, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {detail}" if status else str(detail))
        self.status = status
        self.detail = detail
        self.retry_after = retry_after  # seconds, from the answer's Retry-After header


class HeadMoved(CheckpointAPIError):
    """409 `base_moved`: the session's head is no longer the checkpoint this client last wrote (an operator
    restored or undid, or another writer went on). Nothing was stored. `head` is `{id, seq}` of the new head;
    call `resume()` and continue from its state."""

    def __init__(self, detail: Any, head: JSONDict | None, restore_generation: int | None) -> None:
        super().__init__(409, detail)
        self.head = head
        self.restore_generation = restore_generation


class _Written:
    """What a client last wrote to (or resumed from in) a session: the base of its next patch."""

    __slots__ = ("checkpoint_id", "restore_generation", "state")

    def __init__(self, checkpoint_id: int, restore_generation: int | None, state: Any) -> None:
        self.checkpoint_id = checkpoint_id
        self.restore_generation = restore_generation
        self.state = state  # a private copy: the caller goes on changing its own


class _Held:
    """A state this client read, private (never handed out): the base of a relative read. Kept as its JSON when it
    was read whole, parsed on first use as a base."""

    __slots__ = ("_state", "_wire", "checkpoint_id", "tag")

    def __init__(self, checkpoint_id: int, tag: str, *, state: Any = None, wire: bytes | None = None) -> None:
        self.checkpoint_id = checkpoint_id
        self.tag = tag  # the server's `state_tag`: exactly this state as this token reads it
        self._state = state
        self._wire = wire

    @property
    def state(self) -> Any:
        if self._wire is not None:  # the whole answer it came in
            self._state, self._wire = json.loads(self._wire)["state"], None
        return self._state


class _Reads:
    """The last states read, newest last, for one server and token: a client whose `token` or `base_url` changed
    (a read-only token's masked states, a write token's real ones) starts afresh, so no state read with one
    token's view is a base for another's."""

    SIZE = 4

    def __init__(self) -> None:
        self._scope = b""
        self._held: builtins.list[_Held] = []

    def base(self, base_url: str, token: str) -> _Held | None:
        scope = hashlib.sha256(f"{base_url}\0{token}".encode()).digest()
        if scope != self._scope:
            self._scope, self._held = scope, []
        return self._held[-1] if self._held else None

    def hold(self, held: _Held) -> None:
        self._held = [*(h for h in self._held if h.checkpoint_id != held.checkpoint_id), held][-self.SIZE :]

    def clear(self) -> None:
        self._held = []


class CheckpointClient:
    """One project's sessions and checkpoints, through its bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30,
        retries: int = 4,
        backoff: float = 0.5,
        max_wait: float = 30,
        patches: bool = True,
    ) -> None:
        """`retries`: how many times a request is sent again (0: never); `backoff`: the first wait in seconds,
        doubled at each retry, with jitter; `max_wait`: the longest wait, Retry-After included; `patches`: send
        what changed since the last state written to a session (False: always the whole state)."""
        if urllib.parse.urlsplit(base_url).scheme.lower() not in ("http", "https"):
            # urllib would open file: and ftp: URLs too, and a mistyped scheme failed each call as "cannot reach",
            # retried with backoff; the scheme alone is named: the rest of the URL may hold credentials
            raise ValueError("base_url must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_wait = max_wait
        self.patches = patches
        self._written: dict[str, _Written] = {}
        self._reads = _Reads()

    def __repr__(self) -> str:
        return f"CheckpointClient({self.base_url!r})"  # never the token: reprs end up in logs

    # ---- sessions ------------------------------------------------------------------------

    def create_session(
        self,
        external_id: str,
        agent: str,
        title: str | None = None,
        execution_mode: str | None = None,
        metadata: JSONDict | None = None,
    ) -> JSONDict:
        """Create the session, or update the fields given (so an agent can call this on every start)."""
        body = _without_none(
            {"external_id": external_id, "agent": agent, "title": title, "execution_mode": execution_mode}
        )
        if metadata is not None:
            body["metadata"] = metadata
        return self._request("POST", "/sessions", body, retry=True)  # an upsert: the same twice is the same

    def get_session(self, session: str) -> JSONDict:
        """The session with its head checkpoint, status, restore generation and counts."""
        return self._request("GET", _path("sessions", session))

    def get_summary(self, session: str) -> JSONDict:
        """Counts by name, kind and status, first and last checkpoint, and duration."""
        return self._request("GET", _path("sessions", session, "summary"))

    def resume(self, session: str) -> JSONDict:
        """What to resume from: `{session, restore_generation, checkpoint, state}`.

        An agent that remembers `restore_generation` knows an operator restored it when the number grows.
        The next `create` patches this state.
        """
        resumed = self._request("GET", _path("sessions", session, "resume"))
        if self.patches:
            copy = _copy(resumed["state"])
            self._written[session] = _Written(resumed["checkpoint"]["id"], resumed["restore_generation"], copy)
        return resumed

    def put_live_state(self, session: str, state: Any) -> JSONDict:
        """Heartbeat with the current state (routine checkpoints are taken from it); returns when it was received."""
        return self._request("PUT", _path("sessions", session, "live-state"), {"state": state})

    # ---- writing checkpoints -------------------------------------------------------------

    def create(
        self,
        session: str,
        state: Any,
        name: str = "",
        kind: str = "step",
        status: str | None = None,
        status_reason: str | None = None,
        step: int | None = None,
        phase: int | None = None,
        created_at: When | None = None,
        idempotency_key: str | None = None,
        operation_id: str | None = None,
        metadata: JSONDict | None = None,
        parent: int | None = None,
    ) -> JSONDict:
        """Store one checkpoint (metadata back, no state). Repeating an `idempotency_key` returns the original;
        without one, a new key is made for this call and sent again with each retry.

        `parent` (a checkpoint id of the session) branches from an earlier checkpoint instead of the head.
        After a state written or resumed in this session, only what changed is sent (a JSON Patch); raises
        `HeadMoved` (nothing stored) when the head moved since: `resume()` and go on from its state.
        """
        written = self._written.get(session) if self.patches and parent is None else None
        body = _checkpoint_body(
            state,
            name=name,
            kind=kind,
            status=status,
            status_reason=status_reason,
            step=step,
            phase=phase,
            created_at=created_at,
            idempotency_key=idempotency_key or _new_key(),
            operation_id=operation_id,
            metadata=metadata,
            parent=parent,
        )
        patch = _as_patch(body, written) if written is not None else None
        # the state to remember, copied now: the caller may change its object while the request is out
        copy = _copy(state) if self.patches and patch is None else None
        try:
            stored = self._request("POST", _path("sessions", session, "checkpoints"), patch or body, retry=True)
        except CheckpointAPIError as exc:
            if exc.status == 409 and isinstance(exc.detail, dict) and exc.detail.get("code") == "base_moved":
                self._written.pop(session, None)
                moved = HeadMoved(
                    exc.detail.get("detail"), exc.detail.get("head"), exc.detail.get("restore_generation")
                )
                raise moved from exc
            raise
        if self.patches:
            if parent is None:
                if patch is not None and written is not None:
                    # what was remembered, brought up to date by the same operations (copied: fresh objects):
                    # O(change) where a copy of the whole state costs as much as sending it
                    copy = _apply_own(written.state, _copied(patch["state_patch"]))
                generation = stored.get("restore_generation")
                self._written[session] = _Written(stored["id"], generation, copy)
            else:  # a branch: the head may now be elsewhere; the next write sends its whole state
                self._written.pop(session, None)
        return stored

    def forget(self, session: str) -> None:
        """Drop the state remembered for `session`: its next `create` sends the whole state."""
        self._written.pop(session, None)

    def create_batch(self, items: Iterable[JSONDict]) -> JSONDict:
        """Many checkpoints in one request, all stored or none: each item is `{session, state, …}`; an item
        without an `idempotency_key` gets a new one, so a retried batch adds nothing twice.

        Returns `{created, existing, checkpoints: [{id, session, seq, created}]}`.
        """
        checkpoints = [
            _encode_times({**item, "idempotency_key": item.get("idempotency_key") or _new_key()}) for item in items
        ]
        return self._request("POST", "/checkpoints/batch", {"checkpoints": checkpoints}, retry=True)

    def rollback_to(self, checkpoint_id: int, reason: str = "") -> JSONDict:
        """Restore: a new head sharing that checkpoint's state. Nothing is deleted, so it can be undone."""
        return self._request("POST", _path("checkpoints", checkpoint_id, "restore"), {"reason": reason})

    def fork(self, checkpoint_id: int, title: str = "", external_id: str = "") -> JSONDict:
        """A new session starting from that checkpoint; returns the new session."""
        body = {"title": title, "external_id": external_id}
        return self._request("POST", _path("checkpoints", checkpoint_id, "fork"), body)

    # ---- reading checkpoints -------------------------------------------------------------

    def get(self, checkpoint_id: int) -> JSONDict:
        """One checkpoint with its full `state` (the caller's own object, shared with nobody).

        Reads are relative: the client holds the last few states it read (privately) and names the newest as the
        base, so the server sends what changed since (`state_patch`) and this parses only that."""
        held = self._reads.base(self.base_url, self.token)
        path = _path("checkpoints", checkpoint_id)
        if held is not None:
            try:
                answer, payload = self._get_checkpoint(path, {"base": held.checkpoint_id, "base_tag": held.tag})
            except CheckpointAPIError as exc:
                if exc.status != 404 or not str(exc.detail).startswith("no base checkpoint"):
                    raise
                self._reads.clear()  # the base is gone (retention, a purge): read whole
            else:
                state = _patched(held, answer) if "state_patch" in answer else None
                if state is not None:
                    self._reads.hold(_Held(answer["id"], answer["state_tag"], state=state))
                    answer["state"] = _fresh(state)
                    return answer
                if "state" in answer:
                    return self._whole(answer, payload)
                self._reads.clear()  # a patch this client cannot apply: never guess, read whole
        return self._whole(*self._get_checkpoint(path))

    def _whole(self, answer: JSONDict, payload: bytes) -> JSONDict:
        """A whole state read: the caller gets the object parsed; the client keeps the answer's bytes, parsed again
        only when a later read is relative to it (a single read parses once)."""
        answer.pop("state_patch", None)
        answer.pop("base", None)
        if "state_tag" in answer:
            self._reads.hold(_Held(answer["id"], answer["state_tag"], wire=payload))
        return answer

    def get_latest(self, session: str) -> JSONDict | None:
        """The newest checkpoint (highest seq) with its state, or None for an empty session."""
        return self._newest(session)

    def get_by_name(self, session: str, name: str) -> JSONDict | None:
        """The newest checkpoint with that name, with its state, or None if there is none."""
        return self._newest(session, name=name)

    def get_since(self, session: str, since: When) -> JSONList:
        """Metadata of every checkpoint created at or after `since`, oldest first (all pages)."""
        return [*self.list(session, since=since)]

    def get_between(self, session: str, since: When, until: When) -> JSONList:
        """Metadata of every checkpoint created between `since` and `until` inclusive, oldest first."""
        return [*self.list(session, since=since, until=until)]

    def list(self, session: str, **filters: Any) -> Iterator[JSONDict]:
        """Checkpoint metadata (no states), following `next_cursor` until the last page.

        Filters: name, kind, status, since, until (datetime or ISO string), order ("asc"/"desc"),
        limit (page size, 1–1000).
        """
        query = _encode_times({key: value for key, value in filters.items() if value is not None})
        path = _path("sessions", session, "checkpoints")
        while True:
            page = self._request("GET", path, query=query)
            yield from page["items"]
            if not page.get("next_cursor"):
                return
            query = {**query, "cursor": page["next_cursor"]}

    def diff(self, a_id: int, b_id: int) -> JSONDict:
        """Structural diff from `a_id` to `b_id`: `{from, to, summary: {added, removed, changed, text}, changes}`."""
        return self._request("GET", _path("checkpoints", a_id, "diff", b_id))

    # ---- export and import (Breakpilot style) --------------------------------------------

    def export(self, session: str) -> JSONList:
        """Every checkpoint of the session with its state, as `{id: "<session>:<seq>", name, timestamp, data, metadata}`."""
        exported = []
        for row in self.list(session, limit=1000):
            checkpoint = self.get(row["id"])
            exported.append(
                {
                    "id": f"{session}:{checkpoint['seq']}",
                    "name": checkpoint["name"],
                    "timestamp": checkpoint["created_at"],
                    "data": checkpoint["state"],
                    "metadata": checkpoint["metadata"],
                }
            )
        return exported

    def import_checkpoints(self, session: str, exported: Iterable[JSONDict]) -> JSONDict:
        """Add exported checkpoints to an existing session, in the order given; returns `{created, existing}`.

        Each exported id becomes the idempotency key, so importing the same list twice adds nothing,
        and an import cut short can simply be run again. A repeated id within the list is imported once.
        """
        items: JSONList = []
        seen: set[str] = set()
        for entry in exported:
            key = str(entry["id"])
            if key in seen:
                continue
            seen.add(key)
            items.append(
                {
                    "session": session,
                    "state": entry["data"],
                    "name": entry.get("name") or "",
                    "kind": "imported",
                    "created_at": _timestamp(entry.get("timestamp")),
                    "idempotency_key": key,
                    "metadata": entry.get("metadata") or {},
                }
            )
        totals: JSONDict = {"created": 0, "existing": 0, "checkpoints": []}
        for chunk in _chunks(items):
            result = self.create_batch(chunk)
            totals["created"] += result["created"]
            totals["existing"] += result["existing"]
            totals["checkpoints"].extend(result["checkpoints"])
        return totals

    # ---- phases and reviewers' feedback (Haytham style) --------------------------------------

    def report_phase(
        self,
        session: str,
        number: int,
        name: str | None = None,
        status: str | None = None,
        started_at: When | None = None,
        completed_at: When | None = None,
        duration: float | None = None,
        retry_count: int | None = None,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cost: float | None = None,
        errors: builtins.list[Any] | None = None,
    ) -> JSONDict:
        """Create or update phase `number` (its `name` is needed the first time); only the fields given change."""
        body = _without_none(
            {
                "name": name,
                "status": status,
                "started_at": _iso(started_at) if started_at is not None else None,
                "completed_at": _iso(completed_at) if completed_at is not None else None,
                "duration": duration,
                "retry_count": retry_count,
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
                "cost": cost,
                "errors": errors,
            }
        )
        return self._request("PUT", _path("sessions", session, "phases", number), body)

    def add_phase_output(
        self,
        session: str,
        number: int,
        agent_name: str,
        content: str = "",
        status: str = "",
        model: str = "",
        tokens_in: int = 0,
        tokens_out: int = 0,
        tools_used: builtins.list[str] | None = None,
        duration: float | None = None,
        error: str = "",
    ) -> JSONDict:
        """An agent's markdown output for the phase; reviewers read it on the phase page."""
        body = {
            "agent_name": agent_name,
            "content": content,
            "status": status,
            "model": model,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "tools_used": tools_used or [],
            "error": error,
        }
        if duration is not None:
            body["duration"] = duration
        return self._request("POST", _path("sessions", session, "phases", number, "outputs"), body)

    def get_phase_feedback(self, session: str, number: int) -> JSONDict | None:
        """The latest review of the phase (`action`, `approved`, `comments`, `requested_changes`, …), or None yet."""
        try:
            return self._request("GET", _path("sessions", session, "phases", number, "feedback"))
        except CheckpointAPIError as exc:
            if exc.status == 404 and "no feedback" in str(exc.detail):
                return None
            raise

    # ---- plumbing ------------------------------------------------------------------------

    def _newest(self, session: str, **filters: Any) -> JSONDict | None:
        query = {**filters, "order": "desc", "limit": 1}
        page = self._request("GET", _path("sessions", session, "checkpoints"), query=query)
        return self.get(page["items"][0]["id"]) if page["items"] else None

    def _request(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        """The answer parsed; `options` are `_exchange`'s (`query`, `retry`)."""
        return self._parsed(*self._exchange(method, path, body, **options))

    def _parsed(self, url: str, payload: bytes) -> Any:
        try:
            return json.loads(payload) if payload else None
        except ValueError as exc:  # a proxy's HTML page with a 200
            raise CheckpointAPIError(0, f"{url} answered with something that is not JSON") from exc

    def _get_checkpoint(self, path: str, query: JSONDict | None = None) -> tuple[JSONDict, bytes]:
        """A checkpoint read, and the bytes it came in."""
        url, payload = self._exchange("GET", path, query=query)
        return self._parsed(url, payload), payload

    def _exchange(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: JSONDict | None = None,
        retry: bool | None = None,
    ) -> tuple[str, bytes]:
        """The request's URL and the bytes answered, after retries. `retry`: whether sending the request twice is
        harmless (default: GET and PUT, which are); one that is not is sent again only when its connection was
        refused."""
        url = f"{self.base_url}/api/v1{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            # allow_nan=False: the server refuses NaN and Infinity, so fail here with a clear ValueError.
            data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        repeatable = method in ("GET", "PUT") if retry is None else retry
        attempt = 0
        while True:
            try:
                payload = self._send(urllib.request.Request(url, data=data, headers=headers, method=method))  # noqa: S310 - base_url is http(s)://, checked in __init__
                break
            except CheckpointAPIError as exc:
                wait = self._wait_before_retry(exc, attempt, repeatable)
                if wait is None:
                    raise
            time.sleep(wait)
            attempt += 1
        return url, payload

    def _send(self, request: urllib.request.Request) -> bytes:
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                where = exc.headers.get("Location", "?")
                detail = f"redirected to {where}: not followed (it would carry the token); use that address as base_url"
                raise CheckpointAPIError(exc.code, detail) from exc
            retry_after = _retry_after(exc.headers.get("Retry-After"))
            raise CheckpointAPIError(exc.code, _error_detail(exc), retry_after=retry_after) from exc
        except (OSError, http.client.HTTPException) as exc:  # URLError, refused, reset, timeout
            reason = getattr(exc, "reason", exc)
            raise CheckpointAPIError(0, f"cannot reach {self.base_url}: {reason}") from exc

    def _wait_before_retry(self, error: CheckpointAPIError, attempt: int, repeatable: bool) -> float | None:
        """Seconds to wait before sending the request again, or None to give up with `error`."""
        if attempt >= self.retries:
            return None
        never_arrived = error.status == 0 and isinstance(_reason(error), ConnectionRefusedError)
        if not never_arrived and not (repeatable and (error.status == 0 or error.status in _RETRY_STATUSES)):
            return None
        if error.retry_after is not None:
            return min(error.retry_after, self.max_wait)
        return min(self.backoff * 2**attempt, self.max_wait) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter (no herd), not a secret


def _new_key() -> str:
    """An idempotency key for one logical write, reused by its retries."""
    return f"cc-{uuid.uuid4().hex}"


def _reason(error: CheckpointAPIError) -> BaseException | None:
    cause = error.__cause__
    return getattr(cause, "reason", cause)


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds from now: a number of seconds or an HTTP date (RFC 9110); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # str.isdigit alone takes "²", which float() refuses
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _path(*segments: str | int) -> str:
    # safe="": a session id like "team/run 1" must stay one path segment.
    return "".join("/" + urllib.parse.quote(str(segment), safe="") for segment in segments)


def _without_none(data: JSONDict) -> JSONDict:
    return {key: value for key, value in data.items() if value is not None}


def _checkpoint_body(state: Any, **fields: Any) -> JSONDict:
    return _encode_times({"state": state, **_without_none(fields)})


_SMALL_PATCH = 64 * 1024  # a patch this small is sent without encoding the whole state to compare sizes


def _as_patch(body: JSONDict, written: _Written) -> JSONDict | None:
    """`body` with its state as a patch against what was last written, or None when the patch is not smaller."""
    operations = json_patch(written.state, body["state"])
    size = len(_dumps(operations))
    if size > _SMALL_PATCH and size >= len(_dumps(body["state"])):
        return None
    patched = {key: value for key, value in body.items() if key != "state"}
    patched.update(state_patch=operations, base={"id": written.checkpoint_id})
    if written.restore_generation is not None:
        patched["restore_generation"] = written.restore_generation
    return patched


def json_patch(old: Any, new: Any) -> builtins.list[JSONDict]:
    """RFC 6902 operations turning `old` into `new`: changed keys replaced (or patched inside), missing keys
    removed, new keys added, list items appended with `/-` and trailing ones removed. Not minimal for an insertion
    at the front of a list (every item after it is replaced): the caller compares sizes and may send the whole."""
    operations: builtins.list[JSONDict] = []
    _diff(old, new, "", operations)
    return operations


# Scalars whose equality in Python is equality in JSON when their types are the same (floats are not: -0.0 == 0.0).
_EXACT = (str, int, bool, type(None))


def _diff(old: Any, new: Any, path: str, out: builtins.list[JSONDict]) -> None:
    """Append to `out` what turns `old` into `new`. A state is mostly strings under objects and lists, all of them
    unchanged: those are compared where they are met, and a path is spelled only for what differs or is walked
    into (a call and an escaped path a value cost ~1.4 ms on a 250 kB state; see docs/benchmarks.md)."""
    if type(old) is not type(new):  # 1, 1.0 and true are equal in Python, not in JSON
        out.append({"op": "replace", "path": path, "value": new})
    elif isinstance(old, dict):
        _diff_object(old, new, path, out)
    elif isinstance(old, list):
        _diff_array(old, new, path, out)
    elif old != new or (type(old) is float and repr(old) != repr(new)):  # -0.0 == 0.0, but not in JSON
        out.append({"op": "replace", "path": path, "value": new})


def _diff_object(old: JSONDict, new: JSONDict, path: str, out: builtins.list[JSONDict]) -> None:
    for key in old:
        if key not in new:
            out.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
    for key, value in new.items():
        if key not in old:
            out.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
            continue
        before = old[key]
        kind = type(value)
        if kind is type(before) and kind in _EXACT:
            if before != value:
                out.append({"op": "replace", "path": f"{path}/{_escape(key)}", "value": value})
        else:
            _diff(before, value, f"{path}/{_escape(key)}", out)


def _diff_array(old: builtins.list[Any], new: builtins.list[Any], path: str, out: builtins.list[JSONDict]) -> None:
    # the scalar comparison is _diff_object's, written out again: a call per value is what it saves
    common = min(len(old), len(new))
    for index in range(common):
        before, value = old[index], new[index]
        kind = type(value)
        if kind is type(before) and kind in _EXACT:
            if before != value:
                out.append({"op": "replace", "path": f"{path}/{index}", "value": value})
        else:
            _diff(before, value, f"{path}/{index}", out)
    out.extend({"op": "add", "path": f"{path}/-", "value": value} for value in new[common:])
    out.extend({"op": "remove", "path": f"{path}/{index}"} for index in range(len(old) - 1, common - 1, -1))


def _apply_own(document: Any, operations: builtins.list[JSONDict]) -> Any:
    """`document` (the client's own copy) changed in place by operations `json_patch` made: replace, add (a key,
    or `/-` to a list), remove."""
    for operation in operations:
        tokens = [token.replace("~1", "/").replace("~0", "~") for token in operation["path"].split("/")[1:]]
        if not tokens:
            document = operation["value"]
            continue
        parent = document
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last: Any = tokens[-1]
        if isinstance(parent, list):
            if last == "-":
                parent.append(operation["value"])
                continue
            last = int(last)
        if operation["op"] == "remove":
            del parent[last]
        else:
            parent[last] = operation["value"]
    return document


def _patched(held: _Held, answer: JSONDict) -> Any:
    """The state `answer`'s `state_patch` makes of `held` (left as it was: unchanged parts are shared between the
    two, both private), or None when the patch is not against it or does not apply."""
    base = answer.pop("base", None) or {}
    operations = answer.pop("state_patch")
    if base.get("id") != held.checkpoint_id or base.get("tag") != held.tag:
        return None
    try:
        return _apply_shared(held.state, operations)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _apply_shared(document: Any, operations: builtins.list[JSONDict]) -> Any:
    """RFC 6902 add, remove and replace applied to a new document: the containers on each operation's path are
    copied (once), everything else shared with `document`, which stays as it was."""
    box = [document]
    fresh = {id(box)}

    def own(parent: Any, key: Any) -> Any:
        child = parent[key]
        if type(child) not in (dict, list):
            raise TypeError("a path through a value that is not a container")
        if id(child) not in fresh:
            child = child.copy()
            parent[key] = child
            fresh.add(id(child))
        return child

    for operation in operations:
        op, tokens = operation["op"], [_unescape(token) for token in operation["path"].split("/")[1:]]
        if not tokens:  # the whole document
            if op not in ("add", "replace"):
                raise ValueError(f"{op} of the whole document")
            box[0] = operation["value"]
            continue
        parent: Any = box
        key: Any = 0
        for at, token in enumerate(tokens, 1):
            parent = own(parent, key)
            key = _index(parent, token, adding=op == "add" and at == len(tokens))
        if op == "remove":
            del parent[key]
        elif op == "add" and isinstance(parent, list):
            parent.insert(key, operation["value"])
        elif op in ("add", "replace"):
            if op == "replace" and isinstance(parent, dict) and key not in parent:
                raise KeyError(key)
            parent[key] = operation["value"]
        else:
            raise ValueError(f"unexpected operation {op!r}")
    return box[0]


def _index(parent: Any, step: str, *, adding: bool) -> Any:
    if isinstance(parent, dict):
        return step
    if step == "-" and adding:
        return len(parent)
    if not (step.isascii() and step.isdigit()) or (step != "0" and step.startswith("0")):
        raise ValueError(f"not a list index: {step!r}")
    index = int(step)
    if index > len(parent) or (index == len(parent) and not adding):
        raise IndexError(index)
    return index


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _fresh(state: Any) -> Any:
    """A deep copy of a private state for a caller: marshal is the standard library's fastest copy of JSON values
    (~6 ms for 2 MB). A private state never holds one container twice, so the copy holds none twice either."""
    return marshal.loads(marshal.dumps(state))  # noqa: S302 - bytes it made itself, a moment ago


def _copied(value: Any) -> Any:
    return json.loads(_dumps(value))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _copy(state: Any) -> Any:
    """A deep copy of JSON, as fast as the standard library makes one (and a check it is JSON)."""
    return _copied(state)


def _iso(value: When) -> str:
    """Datetimes as ISO 8601; a naive datetime is taken as UTC, the API's clock."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat()
    return value


def _encode_times(data: JSONDict) -> JSONDict:
    return {key: _iso(value) if key in _TIME_FIELDS and value is not None else value for key, value in data.items()}


def _timestamp(value: Any) -> str | None:
    """Exported timestamps are ISO strings; older exports may carry epoch seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC).isoformat()
    return value if isinstance(value, str) and value else None


def _chunks(items: JSONList) -> Iterator[JSONList]:
    """Split a batch so that each request stays under the API's item and body limits."""
    chunk: JSONList = []
    size = 0
    for item in items:
        item_size = len(json.dumps(item, ensure_ascii=False).encode())
        if chunk and (len(chunk) >= _BATCH_ITEMS or size + item_size > _BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk


def _error_detail(exc: urllib.error.HTTPError) -> Any:
    """The server's {"detail": …}; for a non-JSON error page (a proxy, a crash), its first bytes."""
    body = exc.read()
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text[:500] or exc.reason
    if isinstance(data, dict) and "code" in data:  # a refusal that says more than a message (base_moved: the head)
        return data
    return data.get("detail", data) if isinstance(data, dict) else data
