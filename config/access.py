"""Without ACCESS_LOG, a web process logs one line a minute of how many requests it answered, by status class,
instead of one line per request (an agent writing a checkpoint a second made 3,600 lines in 20 minutes)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

logger = logging.getLogger("checkpoint_console.requests")
INTERVAL_SECONDS = 60.0


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, status: int) -> None:
        with self.lock:
            self.counts[f"{status // 100}xx"] += 1

    def flush(self) -> str | None:
        """Log and forget the counts so far; nothing when there were no requests."""
        with self.lock:
            counts, self.counts = self.counts, Counter()
        if not counts:
            return None
        by_class = ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items()))
        line = f"{counts.total():,} requests in the last minute ({by_class})"
        logger.info(line)
        return line


TALLY = Tally()
# Ends the thread: the test session sets it before pytest closes the stream Django's log handler was given (a
# minute's line written after that printed "Logging error … I/O operation on closed file" into a CI run).
STOP = threading.Event()


def _every_interval() -> None:
    while not STOP.wait(INTERVAL_SECONDS):
        TALLY.flush()


class RequestCounts:
    """Counts each response into TALLY; a daemon thread of this process logs the tally every minute."""

    started = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        if not RequestCounts.started:
            RequestCounts.started = True
            threading.Thread(target=_every_interval, name="request-counts", daemon=True).start()

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        TALLY.add(response.status_code)
        return response
