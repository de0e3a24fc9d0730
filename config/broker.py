"""The embedded broker of `make run`: kombu's filesystem transport, with every file written whole.

kombu's own transport opens a message file under its final name and then writes it. A worker polling the folder
can list the file in between, move it away and read nothing: `JSONDecodeError`, and the worker's consumer dies
("Unrecoverable error"). The exchange tables that fanout uses (worker pings, /health/) are created the same way.
Here every file is written to a hidden temporary name in the same folder and only then renamed (or linked) into
place, which POSIX makes atomic: a reader sees no file or a whole one. A consumed message is renamed into the
processed folder (same file system, so the rename is atomic too and only one consumer can win it) rather than
moved to the system's shared temporary folder.

`config.celery` maps the `filesystem://` scheme to this transport, so the broker URL stays the one kombu documents.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from fcntl import LOCK_EX
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.transport.filesystem import exchange_queue_t, lock, unlock
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

ALIAS = "filesystem"
TEMPORARY_SUFFIX = ".tmp"  # kombu's _get, _size and _purge look only at names ending ".<queue>.msg"


def write_atomically(path: Path, data: bytes, *, replace: bool = True) -> bool:
    """Write `data` to `path` in one step for readers. replace=False creates the file only if it does not exist
    (False then, nothing written). Files are private to the user: a message carries task arguments."""
    descriptor, temporary = tempfile.mkstemp(prefix=".", suffix=TEMPORARY_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)  # fails when the file exists: never overwrites a table another process wrote
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]  # as kombu's
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"  # kombu's name: consumed in this order
        try:
            write_atomically(Path(self.data_folder_out) / name, str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add a message to {self.data_folder_out!r}") from exc

    def _get(self, queue: str) -> dict[str, Any]:  # type: ignore[override]  # as kombu's
        wanted = f"{queue}.msg"
        folder = Path(self.data_folder_in)
        processed = Path(self.processed_folder)
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            taken = processed / name
            try:
                os.rename(folder / name, taken)  # atomic: of two consumers, one wins and the other moves on
            except OSError:
                continue
            try:
                payload = taken.read_bytes()
                if not self.store_processed:
                    taken.unlink()
            except OSError as exc:
                raise ChannelError(f"Cannot read {str(taken)!r} from the queue") from exc
            message: dict[str, Any] = loads(bytes_to_str(payload))
            return message
        raise Empty()

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str | None, queue: str) -> None:
        file: Path = self._exchange_file(exchange)  # type: ignore[attr-defined]  # kombu's name check; not in its stubs
        self.control_folder.mkdir(exist_ok=True)
        binding = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        if write_atomically(file, str_to_bytes(dumps([binding])), replace=False):
            return
        # The table exists: kombu's own update, under its lock, rewrites it in place.
        try:
            with file.open("rb+", buffering=0) as table:
                lock(table, LOCK_EX)
                try:
                    queues = [exchange_queue_t(*q) for q in loads(bytes_to_str(table.read()))]
                    if binding not in queues:
                        queues.insert(0, binding)
                        table.seek(0)
                        table.write(str_to_bytes(dumps(queues)))
                finally:
                    unlock(table)
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc


class Transport(filesystem.Transport):
    Channel = Channel

    @property
    def default_connection_params(self) -> dict[str, Any]:
        """A folder has no host: no "No hostname was supplied" warning from every process at start."""
        return {"port": self.default_port, "hostname": ""}


def register() -> None:
    """Before any connection resolves the scheme: config is imported first in every process (web, worker, beat)."""
    TRANSPORT_ALIASES[ALIAS] = f"{__name__}:Transport"
