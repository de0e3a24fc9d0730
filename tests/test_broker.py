"""`make run`'s embedded broker (config/broker.py): a polling consumer never reads a message file half-written, and
fanout (worker pings, /health/) still works."""

from __future__ import annotations

import threading
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection
from kombu.transport import filesystem

from config import broker

MESSAGES = 12
PAD = "x" * (8 * 2**20)  # 8 MB: writing one takes milliseconds, long enough for a poller to see it half-written


def folders(root: Path) -> dict[str, str]:
    for name in ("queue", "processed", "control"):
        (root / name).mkdir()
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "processed_folder": str(root / "processed"),
        "control_folder": str(root / "control"),
    }


def race(transport: type, root: Path) -> tuple[list[int], int]:
    """One thread puts MESSAGES large messages while another polls the folder as fast as it can, as a worker's
    consumer does: what the poller received in order, and how many files it read that were not whole JSON."""
    options = folders(root)
    received: list[int] = []
    unreadable = 0
    with (
        Connection(transport=transport, transport_options=options) as writing,
        Connection(transport=transport, transport_options=options) as reading,
    ):
        producer, consumer = writing.default_channel, reading.default_channel

        def put_all() -> None:
            for number in range(MESSAGES):
                producer._put("jobs", {"number": number, "pad": PAD})

        writer = threading.Thread(target=put_all)
        writer.start()
        while writer.is_alive() or consumer._size("jobs"):
            try:
                received.append(consumer._get("jobs")["number"])
            except Empty:
                continue
            except ValueError:  # JSONDecodeError: the worker's "Unrecoverable error"
                unreadable += 1
        writer.join()
    return received, unreadable


def test_a_polling_consumer_reads_every_message_whole_and_in_order(tmp_path):
    received, unreadable = race(broker.Transport, tmp_path)
    assert unreadable == 0
    assert received == list(range(MESSAGES))
    assert list((tmp_path / "queue").iterdir()) == [] and list((tmp_path / "processed").iterdir()) == []


def test_kombus_own_transport_lets_a_consumer_read_a_file_being_written(tmp_path, monkeypatch):
    """Why config/broker.py exists: the stock transport creates the file, then writes it. If kombu fixes that, this
    test fails, and the subclass can go. The consumer polls at the moment between the two (a race the thread
    above only sometimes loses on a loaded machine): it takes the empty file and cannot read it."""
    options = folders(tmp_path)
    polled: list[str] = []
    with (
        Connection(transport=filesystem.Transport, transport_options=options) as writing,
        Connection(transport=filesystem.Transport, transport_options=options) as reading,
    ):
        consumer, real_lock = reading.default_channel, filesystem.lock

        def poll_then_lock(file, flags):  # type: ignore[no-untyped-def]
            try:
                polled.append(f"read {consumer._get('jobs')}")
            except ValueError:  # JSONDecodeError: the worker's "Unrecoverable error"
                polled.append("unreadable")
            except Empty:
                polled.append("nothing there")
            return real_lock(file, flags)

        monkeypatch.setattr(filesystem, "lock", poll_then_lock)
        writing.default_channel._put("jobs", {"number": 0})
    assert polled == ["unreadable"]


def test_the_filesystem_scheme_is_the_atomic_transport():
    assert Connection("filesystem://").transport_cls == "filesystem"
    assert Connection("filesystem://").get_transport_cls() is broker.Transport


def test_fanout_reaches_every_bound_queue_and_the_table_is_created_whole(tmp_path):
    """Worker pings are fanout: the exchange's table lists each worker's queue, and a put reaches all of them."""
    options = folders(tmp_path)
    with Connection(transport=broker.Transport, transport_options=options) as conn:
        channel = conn.default_channel
        channel.exchange_declare("pings", type="fanout")
        for queue in ("worker-a", "worker-b", "worker-a"):
            channel.queue_declare(queue)
            channel.queue_bind(queue, "pings")
        channel._put_fanout("pings", {"ping": 1}, "")
        assert channel._get("worker-a") == {"ping": 1} and channel._get("worker-b") == {"ping": 1}
        with pytest.raises(Empty):
            channel._get("worker-a")
        assert sorted(q.queue for q in channel.get_table("pings")) == ["worker-a", "worker-b"]
    assert not [p for p in (tmp_path / "control").iterdir() if p.name.endswith(broker.TEMPORARY_SUFFIX)]


def test_message_files_are_private_to_the_user(tmp_path):
    """A message carries a task's arguments: other local users cannot read it (mkstemp's 0600)."""
    options = folders(tmp_path)
    with Connection(transport=broker.Transport, transport_options=options) as conn:
        conn.default_channel._put("jobs", {"secret": "s"})
    (message,) = (tmp_path / "queue").iterdir()
    assert message.stat().st_mode & 0o077 == 0


def test_the_broker_folders_are_private_to_the_user(settings):
    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("the embedded broker is not in use (CELERY_BROKER_URL is set)")
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]).parent
    assert folder.stat().st_mode & 0o077 == 0
    assert all(child.stat().st_mode & 0o077 == 0 for child in folder.iterdir() if child.is_dir())
