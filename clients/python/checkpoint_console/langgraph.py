"""ConsoleSaver: a LangGraph checkpoint saver that keeps a graph's checkpoints in the Checkpoint Console.

    from checkpoint_console.langgraph import ConsoleSaver

    graph = builder.compile(checkpointer=ConsoleSaver("https://console.example.com", "cpk_…"))
    graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "chat-1"}})

A thread is a console session and each checkpoint a console checkpoint, so the console's timeline, diffs,
alerts, restore and fork work on LangGraph threads. Values travel as typed JSON (`checkpoint_console.typedjson`)
made by this saver's serde, so `get_tuple` gives back what `put` was given; a put sends only what changed
(`checkpoint_console.lgwire`). Needs the distribution's `langgraph` extra: `pip install "./clients/python[langgraph]"`.

Reading is strict: whoever holds a project's write token decides what the console hands back, and LangGraph's
msgpack records name a callable to import and call. The default serde revives only LangGraph's safe types
(its `SAFE_MSGPACK_TYPES`: datetimes, uuids, LangChain messages and documents, Send, Command, Interrupt…), the
types passed as `allowed_modules`, and those LangGraph adds through `with_allowlist` when it compiles a graph
under `LANGGRAPH_STRICT_MSGPACK`. Anything else comes back as its raw payload, with LangGraph's warning naming
the type. A serde passed in decides for itself (a pickle-capable one is the caller's own risk).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import httpx

try:
    import orjson
except ImportError:  # pragma: no cover - LangChain depends on it
    orjson = None  # type: ignore[assignment]
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

from . import typedjson
from .client import CheckpointAPIError
from .lgread import Held, Reads, held_of, uncollected
from .lgwire import Memory, PutPlan, Sent, plan_put

__all__ = ["AllowedType", "CheckpointAPIError", "ConsoleSaver"]

AllowedType = tuple[str, ...] | type  # (module, name) or the class itself

_API = "/api/v1/langgraph"
# The checkpoint header and metadata are LangGraph's bookkeeping, which the server reads (tree parents,
# `list` filters), so they are encoded plainly even when the saver's serde encrypts channel values.
_PLAIN = JsonPlusSerializer()


class ConsoleSaver(BaseCheckpointSaver[str]):
    """LangGraph's checkpoint saver over the console's HTTP API, sync (httpx.Client) and async (httpx.AsyncClient).

    `token` is a project's API token (write scope to run graphs). `client` is the httpx.Client in use: add
    event hooks, proxies or transport options to it as to any. Close with `close()`/`aclose()` or use the saver
    as a (sync or async) context manager. `allowed_modules` names the types of your own state (classes or
    `(module, name)` pairs) that reads may rebuild besides LangGraph's safe ones.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        serde: SerializerProtocol | None = None,
        allowed_modules: Iterable[AllowedType] = (),
        timeout: float = 30.0,
        memory_size: int = 512,
        read_memory_size: int = 64,
    ) -> None:
        allowed = [_type_key(entry) for entry in allowed_modules]
        given = serde is not None
        # An explicit allowlist (None when empty) is strict whatever LANGGRAPH_STRICT_MSGPACK says.
        super().__init__(serde=serde or JsonPlusSerializer(allowed_msgpack_modules=allowed or None))
        if allowed and given:
            self.serde = self.with_allowlist(allowed).serde
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._timeout = httpx.Timeout(timeout)
        self.client = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=self._timeout)
        self._async_client: httpx.AsyncClient | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self.memory: Memory[Sent] = Memory(memory_size)
        self._read_memory_size = read_memory_size
        self._reads = Reads(self.serde, token, read_memory_size)

    def __repr__(self) -> str:
        return f"ConsoleSaver({self.base_url!r})"  # never the token: reprs end up in logs

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def async_client(self) -> httpx.AsyncClient:
        """The httpx.AsyncClient of the running event loop (a client's connections belong to one loop)."""
        loop = asyncio.get_running_loop()
        if self._async_client is None or self._async_loop is not loop:
            self._async_client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=self._timeout)
            self._async_loop = loop
        return self._async_client

    def close(self) -> None:
        """Close the sync client. An async client can only be closed in its loop: async code uses aclose()."""
        self.client.close()

    async def aclose(self) -> None:
        """Close both clients; keep-alive connections left open hold a server worker each."""
        self.client.close()
        if self._async_client is not None:
            await self._async_client.aclose()
            self._async_client = None

    def __enter__(self) -> ConsoleSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> ConsoleSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- versions and values -----------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Zero-padded counter plus a random fraction, like InMemorySaver's: versions sort as strings, and a
        version equal to the base's means the same value even across branches."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"  # noqa: S311 - a version's tie-breaker, as LangGraph's savers make it

    def _encode(self, value: Any) -> Any:
        return typedjson.from_typed(*self.serde.dumps_typed(value))

    @property
    def reads(self) -> Reads:
        """The decoder and the tuples decoded, for this saver's serializer and token: `with_allowlist` copies a
        saver, and the copy (another serializer) must not be handed what the original decoded, nor the reverse."""
        token = self._headers["Authorization"]
        if not self._reads.serves(self.serde, token):
            self._reads = Reads(self.serde, token, self._read_memory_size)
        return self._reads

    def _decode(self, value: Any) -> Any:
        return self.reads.decoder.decode(value)

    # ---- request bodies and answers (shared by the sync and async methods) -------------

    def _plan(
        self, config: RunnableConfig, checkpoint: Checkpoint, new_versions: ChannelVersions, *, relative: bool
    ) -> PutPlan:
        thread_id, checkpoint_ns = _thread(config), _ns(config)
        base = self.memory.get(thread_id, checkpoint_ns) if relative else None
        return plan_put(
            checkpoint["channel_values"],
            checkpoint["channel_versions"],
            new_versions,
            checkpoint["id"],
            base,
            self._encode,
        )

    def _put_body(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, plan: PutPlan
    ) -> dict[str, Any]:
        header = {key: value for key, value in checkpoint.items() if key != "channel_values"}
        return {
            "thread_id": _thread(config),
            "checkpoint_ns": _ns(config),
            "parent_checkpoint_id": get_checkpoint_id(config),
            "checkpoint": typedjson.from_typed(*_PLAIN.dumps_typed(header)),
            "metadata": typedjson.from_typed(
                *_PLAIN.dumps_typed(get_serializable_checkpoint_metadata(config, metadata))
            ),
            "channels": plan.channels,
            "values": plan.values,
            "appends": plan.appends,
            "base_checkpoint_id": plan.base_checkpoint_id,
        }

    def _stored(self, config: RunnableConfig, plan: PutPlan, answer: Any) -> RunnableConfig:
        self.memory.remember(_thread(config), _ns(config), plan.sent)
        return {
            "configurable": {
                "thread_id": answer["thread_id"],
                "checkpoint_ns": answer["checkpoint_ns"],
                "checkpoint_id": answer["checkpoint_id"],
            }
        }

    def _writes_body(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> dict[str, Any]:
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise ValueError("put_writes needs a config with a checkpoint_id (the one put returned)")
        return {
            "thread_id": _thread(config),
            "checkpoint_ns": _ns(config),
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "writes": [[channel, self._encode(value)] for channel, value in writes],
        }

    def _tuple(
        self, item: dict[str, Any], base: Held | None, again: Callable[[], dict[str, Any]]
    ) -> tuple[CheckpointTuple, Held | None]:
        """The tuple of an answer's item (used up), and what to hold of it for the next read (see `lgread`);
        `again` parses the item's channel values anew from the answer's bytes."""
        with uncollected():
            return self._revived(item, base, again)

    def _revived(
        self, item: dict[str, Any], base: Held | None, again: Callable[[], dict[str, Any]]
    ) -> tuple[CheckpointTuple, Held | None]:
        reads = self.reads
        held, values = held_of(item, base, reads.decoder, again)
        stored = item["checkpoint"]
        header = self._decode({key: value for key, value in stored.items() if key != "channel_values"})
        thread_id, checkpoint_ns, parent_id = item["thread_id"], item["checkpoint_ns"], item["parent_checkpoint_id"]
        found = CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, item["checkpoint_id"]),
            checkpoint=cast(Checkpoint, {**header, "channel_values": values}),
            metadata=self._decode(item["metadata"]),
            parent_config=_config(thread_id, checkpoint_ns, parent_id) if parent_id else None,
            pending_writes=[
                (task_id, channel, self._decode(value)) for task_id, channel, value in item["pending_writes"]
            ],
        )
        return found, held

    def _forget(self, thread_ids: Sequence[str] | None = None) -> None:
        """Drop what this saver holds of the threads (every thread when None): their checkpoints may be gone."""
        self.memory.forget(thread_ids)
        self.reads.held.forget(thread_ids)

    def _get_request(self, config: RunnableConfig) -> tuple[dict[str, Any], Held | None]:
        held = self.reads.held.get(_thread(config), _ns(config))
        body: dict[str, Any] = _get_body(config)
        if held is not None:
            body["base"] = held.console_id
        return body, held

    def _got(self, config: RunnableConfig, response: httpx.Response, base: Held | None) -> CheckpointTuple | None:
        if response.status_code == 404:
            return None
        content = response.content
        found, held = self._tuple(_answer(response), base, lambda: _values(_loads(content)))
        if held is not None:
            self.reads.held.remember(_thread(config), _ns(config), held)
        return found

    def _list_body(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> dict[str, Any]:
        configurable = (config or {}).get("configurable", {})
        body: dict[str, Any] = {
            "thread_id": str(configurable["thread_id"]) if "thread_id" in configurable else None,
            "checkpoint_ns": configurable.get("checkpoint_ns"),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "before": get_checkpoint_id(before) if before else None,
            "limit": limit,
        }
        if filter:
            body["filter"] = {key: typedjson.from_typed(*_PLAIN.dumps_typed(value)) for key, value in filter.items()}
        body["relative"] = True
        return {key: value for key, value in body.items() if value is not None}

    def _page(self, page: dict[str, Any], content: bytes, listing: _Listing) -> Iterator[CheckpointTuple]:
        """A list page's tuples, each read against the one before it (the first against the last page's last);
        `content` is the page's answer, parsed anew for an item's values if a later one is a patch against it."""
        for at, item in enumerate(page["items"]):
            found, listing.held = self._tuple(item, listing.held, functools.partial(_listed_values, content, at))
            yield found

    def _next_body(self, body: dict[str, Any], page: dict[str, Any], listing: _Listing) -> dict[str, Any] | None:
        """The next page's request, asked for before this page is decoded: its base is this page's last tuple,
        which the saver will hold by then (every listed tuple with a console id is held), else the one before."""
        if not page.get("next_cursor"):
            return None
        body = {key: value for key, value in body.items() if key != "base"}
        body["cursor"] = page["next_cursor"]
        items = page.get("items") or ()
        last = items[-1].get("console", {}).get("id") if items else None
        if type(last) is int:
            body["base"] = last
        elif listing.held is not None:
            body["base"] = listing.held.console_id
        return body

    # ---- sync API ----------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.client.request(method, _API + path, **kwargs)
        except httpx.HTTPError as exc:
            raise CheckpointAPIError(0, f"cannot reach {self.base_url}: {exc}") from exc

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        plan = self._plan(config, checkpoint, new_versions, relative=True)
        response = self._call("POST", "/checkpoints", json=self._put_body(config, checkpoint, metadata, plan))
        if _resend(response, plan, config):
            plan = self._plan(config, checkpoint, new_versions, relative=False)
            response = self._call("POST", "/checkpoints", json=self._put_body(config, checkpoint, metadata, plan))
        return self._stored(config, plan, _answer(response))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        _answer(self._call("POST", "/writes", json=self._writes_body(config, writes, task_id, task_path)))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        body, held = self._get_request(config)
        return self._got(config, self._call("POST", "/checkpoint/get", json=body), held)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Newest first, fetched a page at a time as the iteration goes: the next page is asked for (in a thread
        of its own) while this one is decoded, so the server's work on it and the transfer overlap the decoding."""
        if limit is not None and limit < 1:
            return
        body: dict[str, Any] | None = self._list_body(config, filter, before, limit)
        listing = _Listing()
        response = self._call("POST", "/checkpoints/list", json=body)
        while True:
            page = _answer(response)
            body = self._next_body(cast(dict[str, Any], body), page, listing)
            ahead = None if body is None else _Ahead(self._call, "POST", "/checkpoints/list", json=body)
            yield from self._page(page, response.content, listing)
            if ahead is None:
                return
            response = ahead.result()

    def pending_resume(self, thread_id: str) -> Command | None:
        """The answers people gave in the console to the thread's interrupts, not yet taken by the graph, as
        `Command(resume={interrupt_id: value, …})`; None when there are none. A runner's loop:
        `graph.invoke(saver.pending_resume(thread_id), config)` once answers are in. The console counts an
        answer taken once the graph writes its resume (or the thread moves past the checkpoint it waited at)."""
        return self._resume_command(_answer(self._call("POST", "/resume", json={"thread_id": str(thread_id)})))

    async def apending_resume(self, thread_id: str) -> Command | None:
        response = await self._acall("POST", "/resume", json={"thread_id": str(thread_id)})
        return self._resume_command(_answer(response))

    def _resume_command(self, answer: Any) -> Command | None:
        resume = answer.get("resume") if isinstance(answer, dict) else None
        if not resume:
            return None
        return Command(resume={key: self._decode(value) for key, value in resume.items()})

    def delete_thread(self, thread_id: str) -> None:
        self._forget([str(thread_id)])
        _answer(self._call("POST", "/threads/delete", json={"thread_id": str(thread_id)}))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._forget([str(target_thread_id)])
        body = {"source_thread_id": str(source_thread_id), "target_thread_id": str(target_thread_id)}
        _answer(self._call("POST", "/threads/copy", json=body))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._forget()  # which threads the runs touched is known only to the server
        _answer(self._call("POST", "/runs/delete", json={"run_ids": [str(run_id) for run_id in run_ids]}))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        thread_ids = [str(thread_id) for thread_id in thread_ids]
        self._forget(thread_ids)
        _answer(self._call("POST", "/threads/prune", json={"thread_ids": thread_ids, "strategy": strategy}))

    # ---- async API ---------------------------------------------------------------------

    async def _acall(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.async_client.request(method, _API + path, **kwargs)
        except httpx.HTTPError as exc:
            raise CheckpointAPIError(0, f"cannot reach {self.base_url}: {exc}") from exc

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        plan = self._plan(config, checkpoint, new_versions, relative=True)
        response = await self._acall("POST", "/checkpoints", json=self._put_body(config, checkpoint, metadata, plan))
        if _resend(response, plan, config):
            plan = self._plan(config, checkpoint, new_versions, relative=False)
            body = self._put_body(config, checkpoint, metadata, plan)
            response = await self._acall("POST", "/checkpoints", json=body)
        return self._stored(config, plan, _answer(response))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        _answer(await self._acall("POST", "/writes", json=self._writes_body(config, writes, task_id, task_path)))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        body, held = self._get_request(config)
        return self._got(config, await self._acall("POST", "/checkpoint/get", json=body), held)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit < 1:
            return
        body: dict[str, Any] | None = self._list_body(config, filter, before, limit)
        listing = _Listing()
        response = await self._acall("POST", "/checkpoints/list", json=body)
        while True:
            page = _answer(response)
            body = self._next_body(cast(dict[str, Any], body), page, listing)
            ahead = None if body is None else asyncio.ensure_future(self._acall("POST", "/checkpoints/list", json=body))
            try:
                for found in self._page(page, response.content, listing):
                    yield found
            except BaseException:  # the caller stopped (aclose) or decoding failed: the next page is not wanted
                if ahead is not None:
                    ahead.cancel()
                raise
            if ahead is None:
                return
            response = await ahead

    async def adelete_thread(self, thread_id: str) -> None:
        self._forget([str(thread_id)])
        _answer(await self._acall("POST", "/threads/delete", json={"thread_id": str(thread_id)}))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._forget([str(target_thread_id)])
        body = {"source_thread_id": str(source_thread_id), "target_thread_id": str(target_thread_id)}
        _answer(await self._acall("POST", "/threads/copy", json=body))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._forget()
        _answer(await self._acall("POST", "/runs/delete", json={"run_ids": [str(run_id) for run_id in run_ids]}))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        thread_ids = [str(thread_id) for thread_id in thread_ids]
        self._forget(thread_ids)
        body = {"thread_ids": thread_ids, "strategy": strategy}
        _answer(await self._acall("POST", "/threads/prune", json=body))


class _Ahead:
    """A list's next page, requested in a thread of its own while the caller decodes and takes the page before it
    (the request waits on the server and the network, which release the GIL). A daemon thread: a list the caller
    abandons leaves at most one request to finish, and never holds the interpreter open."""

    __slots__ = ("_error", "_response", "_thread")

    def __init__(self, call: Callable[..., httpx.Response], *args: Any, **kwargs: Any) -> None:
        self._response: httpx.Response | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(call, args, kwargs), name="ConsoleSaver.list", daemon=True
        )
        self._thread.start()

    def _run(self, call: Callable[..., httpx.Response], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self._response = call(*args, **kwargs)
        except BaseException as exc:  # raised in the caller's thread by result()
            self._error = exc

    def result(self) -> httpx.Response:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast(httpx.Response, self._response)


class _Listing:
    """What a list holds between its pages: the last tuple it decoded, the base of the next page's first."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: Held | None = None


def _thread(config: RunnableConfig) -> str:
    return str(config["configurable"]["thread_id"])


def _ns(config: RunnableConfig) -> str:
    return config["configurable"].get("checkpoint_ns", "") or ""


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


def _get_body(config: RunnableConfig) -> dict[str, str]:
    """get_tuple's arguments, sent in a POST body like every other call's: a thread id may be 1,000 characters of
    any script, too long for a URL once percent-encoded."""
    body = {"thread_id": _thread(config), "checkpoint_ns": _ns(config)}
    if checkpoint_id := get_checkpoint_id(config):
        body["checkpoint_id"] = checkpoint_id
    return body


def _resend(response: httpx.Response, plan: PutPlan, config: RunnableConfig) -> bool:
    """Whether a relative put must go again with every channel whole: the server lacks its base (409), or the
    base belongs to a deleted history while the put itself starts afresh (410 without a parent)."""
    if plan.base_checkpoint_id is None:
        return False
    if response.status_code == 409:
        return True
    return response.status_code == 410 and not get_checkpoint_id(config)


def _type_key(entry: AllowedType) -> tuple[str, ...]:
    if isinstance(entry, type):
        return (entry.__module__, entry.__name__)
    if isinstance(entry, tuple) and len(entry) >= 2 and all(isinstance(part, str) for part in entry):
        return entry
    raise TypeError(f"allowed_modules takes classes or (module, name) tuples, not {entry!r}")


def _loads(content: bytes) -> Any:
    """JSON with orjson when it is there (LangChain brings it): a 1.9 MB state parsed in 60 % of the time here."""
    with uncollected():
        if orjson is None:
            return json.loads(content)
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:  # integers past 64 bits: the standard library reads them
            return json.loads(content)


def _values(item: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], item["checkpoint"].get("channel_values", {}))


def _listed_values(content: bytes, at: int) -> dict[str, Any]:
    return _values(_loads(content)["items"][at])


def _answer(response: httpx.Response) -> Any:
    """The JSON body of a 2xx answer; CheckpointAPIError with the server's `detail` otherwise."""
    try:
        payload = _loads(response.content) if response.content else None
    except ValueError:
        payload = None
        if response.is_success:
            raise CheckpointAPIError(0, f"{response.url} answered with something that is not JSON") from None
    if response.is_success:
        return payload
    detail = payload.get("detail", payload) if isinstance(payload, dict) else response.text[:500]
    raise CheckpointAPIError(response.status_code, detail)
