"""What the client tests share: the fault proxy in front of the live server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kits.fault_proxy import FaultProxy, serve


@pytest.fixture
def proxy(live_server) -> Iterator[FaultProxy]:
    yield from serve(live_server.url)
