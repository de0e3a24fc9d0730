"""Unpacking uploaded archives of checkpoint files without trusting them.

Refused, with a message saying why: members that would land outside the target folder (absolute
paths, `..`), links and device files, more than `max_files` members, more than `max_bytes` once
unpacked, or a member that unpacks to more than `max_ratio` times its compressed size (zip bombs).
Everything is checked before a single byte is written.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

MAX_BYTES = 2 * 1024**3
MAX_FILES = 200_000
MAX_RATIO = 200


ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


class UnsafeArchive(ValueError):
    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # tarfile's messages span lines


def archive_suffix(name: str) -> str | None:
    """The archive kind a file name says it is (".tar.gz" before ".gz"), or None."""
    lowered = name.lower()
    return next((suffix for suffix in ARCHIVE_SUFFIXES if lowered.endswith(suffix)), None)


def _check_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise UnsafeArchive(f"refused: {name!r} would be written outside the upload folder")
    return path


def extract(archive: Path, target: Path, *, max_bytes: int = MAX_BYTES, max_files: int = MAX_FILES,
            max_ratio: int = MAX_RATIO) -> int:  # fmt: skip
    """Unpack a .zip, .tar, .tar.gz or .tgz into `target`; return the number of files written."""
    name = archive.name.lower()
    if name.endswith(".zip"):
        return _extract_zip(archive, target, max_bytes, max_files, max_ratio)
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        return _extract_tar(archive, target, max_bytes, max_files, max_ratio)
    raise UnsafeArchive("refused: only .zip, .tar, .tar.gz and .tgz archives are accepted")


def _extract_zip(archive: Path, target: Path, max_bytes: int, max_files: int, max_ratio: int) -> int:
    try:
        with zipfile.ZipFile(archive) as zipped:
            members = [m for m in zipped.infolist() if not m.is_dir()]
            if len(members) > max_files:
                raise UnsafeArchive(f"refused: {len(members)} files, more than the limit of {max_files}")
            total = 0
            for member in members:
                _check_name(member.filename)
                if (member.external_attr >> 16) & 0o170000 == 0o120000:
                    raise UnsafeArchive(f"refused: {member.filename!r} is a symbolic link")
                total += member.file_size
                if member.file_size > max_ratio * max(member.compress_size, 1) and member.file_size > 1024 * 1024:
                    raise UnsafeArchive(
                        f"refused: {member.filename!r} expands {max_ratio}× beyond its size (zip bomb?)"
                    )
            if total > max_bytes:
                raise UnsafeArchive(f"refused: {total} bytes unpacked, more than the limit of {max_bytes}")
            for member in members:
                destination = target / _check_name(member.filename)
                destination.parent.mkdir(parents=True, exist_ok=True)
                with zipped.open(member) as source, destination.open("wb") as out:
                    _copy_limited(source, out, member.file_size)
            return len(members)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise UnsafeArchive(f"refused: not a readable zip archive ({exc})") from exc


def _extract_tar(archive: Path, target: Path, max_bytes: int, max_files: int, max_ratio: int) -> int:
    try:
        with tarfile.open(archive) as tarred:
            members = tarred.getmembers()
            files = [m for m in members if m.isfile()]
            for member in members:
                _check_name(member.name)
                if member.issym() or member.islnk():
                    raise UnsafeArchive(f"refused: {member.name!r} is a link")
                if not (member.isfile() or member.isdir()):
                    raise UnsafeArchive(f"refused: {member.name!r} is not a regular file")
            if len(files) > max_files:
                raise UnsafeArchive(f"refused: {len(files)} files, more than the limit of {max_files}")
            total = sum(m.size for m in files)
            if total > max_bytes:
                raise UnsafeArchive(f"refused: {total} bytes unpacked, more than the limit of {max_bytes}")
            if total > 1024 * 1024 and total > max_ratio * max(archive.stat().st_size, 1):
                raise UnsafeArchive(f"refused: expands more than {max_ratio}× its size (a compression bomb?)")
            for member in files:
                destination = target / _check_name(member.name)
                destination.parent.mkdir(parents=True, exist_ok=True)
                source = tarred.extractfile(member)
                if source is None:
                    continue
                with source, destination.open("wb") as out:
                    _copy_limited(source, out, member.size)
            return len(files)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UnsafeArchive(f"refused: not a readable tar archive ({exc})") from exc


def _copy_limited(source, out, declared: int) -> None:  # type: ignore[no-untyped-def]
    """Copy at most the declared size: a member that lies about its size cannot fill the disk."""
    shutil.copyfileobj(source, _Limited(out, declared))


class _Limited:
    def __init__(self, out, limit: int) -> None:  # type: ignore[no-untyped-def]
        self.out, self.left = out, limit

    def write(self, data: bytes) -> int:
        if len(data) > self.left:
            raise UnsafeArchive("refused: a member is larger than the archive says")
        self.left -= len(data)
        return self.out.write(data)
