"""The weight of every console page in a `bench/pages.py` record: bytes of HTML a first view downloads.

    .venv/bin/python bench/pages.py record DIR --full --only console/
    .venv/bin/python bench/page_weight.py DIR [--top N] [--limit BYTES]

Prints one line per page (the superuser's full page, not its htmx fragment), heaviest first, with the tags and
attributes that weigh most on the heaviest pages, so that a page over the limit says where its bytes go. Exits 1
when a page is over `--limit` (100,000 bytes by default: issue #23's "every console page ≤ 100 kB").
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

LIMIT = 100_000
TAG = re.compile(r"<([a-zA-Z][a-zA-Z0-9-]*)\b[^>]*>")
ATTRIBUTE = re.compile(r'\s([a-zA-Z-]+)="([^"]*)"')


def body_of(record_file: Path) -> bytes:
    """The body of one recorded answer: what follows the first blank line (request line, status, headers)."""
    return record_file.read_bytes().split(b"\n\n", 1)[-1]


def contributors(html: str, top: int) -> list[tuple[str, int]]:
    """The bytes spent in each kind of tag (its markup, not its text) and in each attribute's values."""
    weights: Counter[str] = Counter()
    for match in TAG.finditer(html):
        weights[f"<{match.group(1).lower()}>"] += len(match.group(0).encode())
        for name, value in ATTRIBUTE.findall(match.group(0)):
            weights[f"@{name}"] += len(name) + len(value.encode()) + 4
    return weights.most_common(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("dir", help="a record written by bench/pages.py")
    parser.add_argument("--top", type=int, default=3, help="explain this many of the heaviest pages")
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args(argv)
    root = Path(args.dir) / "console"
    pages = sorted(
        ((len(body_of(path)), str(path.relative_to(root))) for path in root.rglob("*.admin.txt")),
        reverse=True,
    )
    for size, name in pages:
        print(f"{size:>9,}  {name}{'  OVER' if size > args.limit else ''}")
    for size, name in pages[: args.top]:
        print(f"\n{name} ({size:,} bytes):")
        for what, weight in contributors(body_of(root / name).decode("utf-8", "replace"), 8):
            print(f"{weight:>9,}  {what}")
    return 1 if any(size > args.limit for size, _ in pages) else 0


if __name__ == "__main__":
    sys.exit(main())
