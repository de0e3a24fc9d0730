"""CPU seconds of a process read from /proc: what a benchmark counts for a PostgreSQL backend or a gunicorn
worker, processes it did not start and cannot ask with getrusage."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process `pid` has used: None when its /proc entry is not readable (gone, or a
    server on another host)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # the name may hold spaces
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def backend_pid() -> int:
    """The pid of this process's PostgreSQL backend (whose CPU counts as the process's own)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])
