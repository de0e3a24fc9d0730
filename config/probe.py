"""Container healthcheck: `python -m config.probe [PATH or URL]` asks the web process, as a client would, and
exits 0 on a 2xx answer. It sends the first ALLOWED_HOSTS name as Host, which Django requires; /health/ and
/metrics are exempt from the HTTPS redirect, so plain HTTP inside the deployment's network is enough.
Standard library only: it must not start Django to say whether Django answers."""

from __future__ import annotations

import os
import sys
import urllib.request


def host_header() -> str:
    first = (os.environ.get("ALLOWED_HOSTS") or "localhost").split(",")[0].strip().lstrip(".")
    return "localhost" if first in ("", "*") else first


def main(argv: list[str]) -> int:
    target = argv[1] if len(argv) > 1 else "/health/live"
    url = target if "://" in target else f"http://127.0.0.1:{os.environ.get('PORT', '8000')}{target}"
    request = urllib.request.Request(url, headers={"Host": host_header()})  # noqa: S310 - the operator's own health check target
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the operator's own health check target
            return 0 if response.status < 300 else 1
    except OSError as exc:  # refused, timed out, or an HTTPError (503 from /health/)
        print(f"{url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
