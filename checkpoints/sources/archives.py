"""Checking and unpacking uploaded archives of checkpoint files without trusting them.

`check` reads an archive's index — a zip's central directory; a tar's headers, decompressing the
stream without writing anything — and refuses, before a byte is unpacked:
- members that would land outside the target folder (absolute paths, `..`, drive letters), names
  with NUL or control characters or that are not UTF-8, paths too long or too deep;
- links, devices and other special files; a name given twice; a name that is both a file and a folder;
- more members, or more bytes once unpacked, than the limits; an archive that unpacks to more than
  `max_ratio` times its own size, or a zip member to more than `max_ratio` times its compressed size;
- encrypted zip members and compression methods zipfile cannot read; damaged, truncated or empty
  archives, and files that are no archive at all.

`extract` runs the same check, then unpacks the checked members once, counting the real bytes it
writes: a member holding more (or fewer) bytes than its header says stops the unpacking.

Every refusal is an `UnsafeArchive` carrying one plain sentence for the operator. Messages name
members as the archive spells them, never a server path, and never quote a library's error text.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import stat
import struct
import tarfile
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO, Literal

from django.conf import settings
from django.template.defaultfilters import filesizeformat

from ..humanize import short_value

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
NAME_PART_MAX_BYTES = 255  # one file or folder name: what Linux file systems take
RATIO_FLOOR = 1024 * 1024  # an archive unpacking to no more than this is never refused for its ratio
TAR_HEADER_MAX_BYTES = 1024 * 1024  # one tar header with its long name or pax data; real ones are under 1 KiB
CHUNK = 64 * 1024
ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
ZIP_ENCRYPTED = 0x1  # general purpose flag bit 0 (traditional or AES encryption)
SHOWN_NAME = 80  # characters of a member's name quoted in a message

Kind = Literal["file", "folder", "link", "special"]


class UnsafeArchive(Exception):
    """An archive the console will not unpack; the message is one sentence for the operator."""


@dataclass(frozen=True)
class Limits:
    max_bytes: int  # unpacked, all members together (for a tar: the tar stream, headers included)
    max_members: int  # files and folders
    max_ratio: int  # unpacked ÷ archive size, and each zip member's size ÷ its compressed size
    max_depth: int  # folders above a member
    max_name_length: int  # characters in a member's whole path

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            max_bytes=settings.IMPORT_ARCHIVE_MAX_BYTES,
            max_members=settings.IMPORT_ARCHIVE_MAX_MEMBERS,
            max_ratio=settings.IMPORT_ARCHIVE_MAX_RATIO,
            max_depth=settings.IMPORT_ARCHIVE_MAX_DEPTH,
            max_name_length=settings.IMPORT_ARCHIVE_MAX_NAME_LENGTH,
        )


def archive_suffix(name: str) -> str | None:
    """The archive kind a file name says it is (".tar.gz" before ".gz"), or None."""
    lowered = name.lower()
    return next((suffix for suffix in ARCHIVE_SUFFIXES if lowered.endswith(suffix)), None)


def check(archive: Path, limits: Limits | None = None) -> Index:
    """Read the archive's index and refuse it (UnsafeArchive) unless every member is safe to unpack."""
    with _open(archive, limits or Limits.from_settings()) as reader:
        return reader.index


def extract(archive: Path, target: Path, limits: Limits | None = None) -> int:
    """Check the archive, then unpack its files once into `target`; return how many were written."""
    with _open(archive, limits or Limits.from_settings()) as reader:
        return reader.unpack(target)


# ---- the index: every member checked before anything is unpacked -----------------------------------


@dataclass
class Index:
    """What an archive's headers say, checked as each member is read: safe relative paths and sizes."""

    archive_bytes: int
    limits: Limits
    files: dict[PurePosixPath, int] = field(default_factory=dict)  # path → size its header declares
    folders: set[PurePosixPath] = field(default_factory=set)
    members: int = 0
    declared_bytes: int = 0

    def add(self, name: str, *, kind: Kind, size: int = 0) -> PurePosixPath | None:
        """Check one member; return its path for a file (None for a folder)."""
        self.members += 1
        if self.members > self.limits.max_members:
            raise UnsafeArchive(
                f"Refused: the archive holds more than {self.limits.max_members:,} files and folders, the limit."
            )
        if kind == "link":
            raise UnsafeArchive(f"Refused: {_shown(name)} is a link; upload plain files only.")
        if kind == "special":
            raise UnsafeArchive(f"Refused: {_shown(name)} is a device or other special file; upload plain files only.")
        path = _safe_path(name, self.limits)
        if kind == "folder":
            if path in self.files:
                raise UnsafeArchive(f"Refused: {_shown(name)} is both a file and a folder in the archive.")
            self.folders.update((path, *path.parents))
            return None
        if not path.parts:
            raise UnsafeArchive("Refused: a file in the archive has no name.")
        if path in self.files:
            raise UnsafeArchive(f"Refused: {_shown(name)} appears twice in the archive.")
        if path in self.folders or any(parent in self.files for parent in path.parents):
            raise UnsafeArchive(f"Refused: {_shown(name)} is both a file and a folder in the archive.")
        self.files[path] = size
        self.folders.update(path.parents)
        self.declared_bytes += size
        self.expect(self.declared_bytes)
        return path

    def expect(self, unpacked: int) -> None:
        """Refuse once the archive is known to unpack to `unpacked` bytes, if that passes a limit."""
        if unpacked > self.limits.max_bytes:
            raise UnsafeArchive(
                f"Refused: the archive unpacks to more than {filesizeformat(self.limits.max_bytes)}, the limit."
            )
        if unpacked > RATIO_FLOOR and unpacked > self.limits.max_ratio * self.archive_bytes:
            raise UnsafeArchive(
                f"Refused: the archive unpacks to more than {self.limits.max_ratio}× its own size of "
                f"{filesizeformat(self.archive_bytes)}: archives that swell that much are built to fill up disks."
            )

    def finish(self) -> None:
        if not self.files:
            raise UnsafeArchive("Refused: the archive holds no files.")


def _shown(name: str) -> str:
    """A member's name as a message quotes it: escaped (no control characters reach a page), cut short."""
    return repr(short_value(name, SHOWN_NAME + 1))


def _safe_path(name: str, limits: Limits) -> PurePosixPath:
    if any(unicodedata.category(char) == "Cc" for char in name):
        raise UnsafeArchive(
            f"Refused: the name {_shown(name)} holds an invisible control character (a line break, say)."
        )
    if any(0xD800 <= ord(char) <= 0xDFFF for char in name):  # undecodable bytes, kept by tarfile as surrogates
        raise UnsafeArchive(f"Refused: the name {_shown(name)} is not readable text (not UTF-8).")
    if len(name) > limits.max_name_length:
        raise UnsafeArchive(
            f"Refused: a name in the archive is {len(name):,} characters long, more than the limit of "
            f"{limits.max_name_length:,} ({_shown(name)})."
        )
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise UnsafeArchive(f"Refused: {_shown(name)} would be written outside the upload folder.")
    if len(path.parts) > limits.max_depth:
        raise UnsafeArchive(
            f"Refused: {_shown(name)} is nested {len(path.parts)} levels deep, more than the limit of {limits.max_depth}."
        )
    if any(len(part.encode()) > NAME_PART_MAX_BYTES for part in path.parts):
        raise UnsafeArchive(
            f"Refused: {_shown(name)} has a file or folder name longer than {NAME_PART_MAX_BYTES} bytes."
        )
    return path


# ---- readers: one per archive kind ------------------------------------------------------------------


_READ_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    tarfile.TarError,
    EOFError,
    OSError,  # gzip's BadGzipFile, bz2's bad data; write errors are turned into sentences in _write
    zlib.error,  # a deflate stream that refers before its start or ends early (not a ValueError)
    lzma.LZMAError,
    ValueError,  # undecodable names, bad header fields
    struct.error,
)

Opener = Callable[[], AbstractContextManager[IO[bytes]]]


class _Reader:
    """An open archive whose index has been checked; `unpack` writes each checked file exactly once."""

    damaged = "Refused: the archive is damaged or truncated and cannot be read."

    def __init__(self, archive: Path, limits: Limits) -> None:
        self.index = Index(archive.stat().st_size, limits)
        if not self.index.archive_bytes:
            raise UnsafeArchive("Refused: the file is empty.")

    def members(self) -> Iterator[tuple[PurePosixPath, int, Opener]]:
        raise NotImplementedError

    def unpack(self, target: Path) -> int:
        written = 0
        try:
            for path, declared, opener in self.members():
                if self.index.files.get(path) != declared:  # the archive changed since its index was read
                    raise UnsafeArchive(self.damaged)
                with opener() as source:
                    written += _write(source, target, path, declared)
                self.index.expect(written)
        except UnsafeArchive:
            raise
        except _READ_ERRORS + (RuntimeError, NotImplementedError) as exc:
            raise UnsafeArchive(self.damaged) from exc
        return len(self.index.files)


def _write(source: IO[bytes], target: Path, path: PurePosixPath, declared: int) -> int:
    """Copy one member, stopping as soon as it holds more bytes than its header declared."""
    destination = target.joinpath(*path.parts)
    shown = _shown(path.as_posix())
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        out = destination.open("xb")  # exclusive: never through a link, never over another member
    except OSError as exc:
        raise UnsafeArchive(f"The server could not unpack {shown}: {exc.strerror or 'write failed'}.") from None
    written = 0
    with out:
        while chunk := source.read(CHUNK):
            written += len(chunk)
            if written > declared:
                raise UnsafeArchive(
                    f"Refused: {shown} holds more bytes than the archive says (a damaged or forged archive)."
                )
            try:
                out.write(chunk)
            except OSError as exc:
                raise UnsafeArchive(f"The server could not unpack {shown}: {exc.strerror or 'write failed'}.") from None
    if written < declared:
        raise UnsafeArchive(
            f"Refused: {shown} holds fewer bytes than the archive says (a damaged or truncated archive)."
        )
    return written


class _Zip(_Reader):
    damaged = "Refused: the zip archive is damaged or truncated and cannot be read."

    def __init__(self, archive: Path, limits: Limits, stack: ExitStack) -> None:
        super().__init__(archive, limits)
        raw = stack.enter_context(archive.open("rb"))
        try:
            entries = _count_zip_entries(raw, limits.max_members)
            if entries > limits.max_members:
                raise UnsafeArchive(
                    f"Refused: the archive holds more than {limits.max_members:,} files and folders, the limit."
                )
            self.zipped = stack.enter_context(zipfile.ZipFile(raw))
            for info in self.zipped.infolist():
                self._check(info)
        except UnsafeArchive:
            raise
        except _READ_ERRORS + (NotImplementedError,) as exc:  # NotImplementedError: a zip version from the future
            raise UnsafeArchive(self.damaged) from exc
        self.index.finish()

    def _check(self, info: zipfile.ZipInfo) -> None:
        name = info.orig_filename  # zipfile cuts `filename` at a NUL; the header holds the whole name
        if "\0" in name:
            raise UnsafeArchive(f"Refused: the name {_shown(name)} holds an invisible zero byte.")
        limit = self.index.limits.max_ratio
        if info.file_size > limit * info.compress_size:  # at any size: 200 members of 1 MiB are a bomb too
            ratio = info.file_size // max(info.compress_size, 1)
            raise UnsafeArchive(
                f"Refused: {_shown(name)} unpacks to {ratio:,}× its compressed size, more than the limit of "
                f"{limit}×: files that swell that much are built to fill up disks."
            )
        mode = info.external_attr >> 16 if info.create_system == 3 else 0  # Unix file type, when made on Unix
        kind: Kind = "folder" if name.endswith(("/", "\\")) else "file"
        if stat.S_IFMT(mode) == stat.S_IFLNK:
            kind = "link"
        elif stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            kind = "special"
        self.index.add(name, kind=kind, size=info.file_size)
        if info.flag_bits & ZIP_ENCRYPTED:
            raise UnsafeArchive(f"Refused: {_shown(name)} is encrypted; upload an archive without a password.")
        if info.compress_type not in ZIP_METHODS:
            raise UnsafeArchive(
                f"Refused: {_shown(name)} is compressed in a way this console cannot read "
                f"(zip method {info.compress_type}); save the archive again as a plain zip."
            )

    def members(self) -> Iterator[tuple[PurePosixPath, int, Opener]]:
        for info in self.zipped.infolist():
            if not info.orig_filename.endswith(("/", "\\")):
                path = PurePosixPath(info.filename.replace("\\", "/"))
                yield path, info.file_size, partial(self.zipped.open, info)


def _count_zip_entries(raw: BinaryIO, stop: int) -> int:
    """Entries in the central directory, counted up to `stop` + 1 without building them.

    ZipFile builds every entry when it opens (~550 bytes of memory each): a 512 MiB upload of empty
    entries would take gigabytes before the member limit could be checked. The end record is found
    with zipfile's own reader.
    """
    zipped: Any = zipfile  # its end-record reader and offsets are private: typeshed does not describe them
    end = zipped._EndRecData(raw)
    if end is None:
        raise UnsafeArchive("Refused: this file is not a zip archive, or it is truncated.")
    start = end[zipped._ECD_LOCATION] - end[zipped._ECD_SIZE]
    if end[zipped._ECD_SIGNATURE] == zipped.stringEndArchive64:
        start -= zipped.sizeEndCentDir64 + zipped.sizeEndCentDir64Locator
    raw.seek(max(start, 0))
    count = 0
    while count <= stop:
        header = raw.read(46)
        if len(header) < 46 or header[:4] != b"PK\x01\x02":
            break
        raw.seek(sum(struct.unpack_from("<HHH", header, 28)), os.SEEK_CUR)  # name, extra field, comment
        count += 1
    return count


class _Tar(_Reader):
    """A .tar, .tar.gz or .tgz. Its headers are spread through the stream, so the check reads it all
    (writing nothing) and holds the stream to the limits as it goes; the unpacking reads it again."""

    def __init__(self, archive: Path, limits: Limits, stack: ExitStack, *, compressed: bool) -> None:
        super().__init__(archive, limits)
        raw: io.BufferedIOBase = stack.enter_context(archive.open("rb"))
        if compressed:
            if raw.read(2) != b"\x1f\x8b":
                raise UnsafeArchive("Refused: this file is not a gzip-compressed tar archive (.tar.gz or .tgz).")
            raw.seek(0)
            raw = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
        self.stream = _Bounded(raw, self.index)
        try:
            # typeshed's fileobj protocol also asks for write and close, which reading a caller's fileobj never calls
            tarred = tarfile.open(fileobj=self.stream, mode="r:")  # type: ignore[call-overload]  # noqa: SIM115
            self.tarred = stack.enter_context(tarred)  # the stack closes it
            self.checked = [member for member in self.tarred if self._check(member)]
            self._check_end()
        except UnsafeArchive:
            raise
        except _READ_ERRORS as exc:
            raise UnsafeArchive(self.damaged) from exc
        self.index.finish()

    def _check(self, member: tarfile.TarInfo) -> bool:
        kind: Kind = "special"
        if member.isreg() and not member.issparse():
            kind = "file"
        elif member.isdir():
            kind = "folder"
        elif member.issym() or member.islnk():
            kind = "link"
        return self.index.add(member.name, kind=kind, size=member.size if kind == "file" else 0) is not None

    def _check_end(self) -> None:
        """After the last member only zero blocks may follow, to the end: not a truncated or spliced stream."""
        self.stream.seek(self.tarred.offset)
        if self.stream.read(tarfile.BLOCKSIZE) != tarfile.NUL * tarfile.BLOCKSIZE:
            raise UnsafeArchive(self.damaged)
        while chunk := self.stream.read(CHUNK):  # also makes gzip check its length and CRC
            if chunk.count(0) != len(chunk):
                raise UnsafeArchive(self.damaged)

    def members(self) -> Iterator[tuple[PurePosixPath, int, Opener]]:
        for member in self.checked:
            path = PurePosixPath(member.name.replace("\\", "/"))
            yield path, member.size, partial(self._open_member, member)

    def _open_member(self, member: tarfile.TarInfo) -> IO[bytes]:
        source: IO[bytes] | None = self.tarred.extractfile(member)
        if source is None:
            raise UnsafeArchive(self.damaged)
        return source


class _Bounded:
    """The decompressed tar stream, held to the index's limits as tarfile reads and seeks through it.

    tarfile seeks past a member's data and reads a long name or pax header whole: without this, a
    header declaring a huge size or a gigabyte-long name would be decompressed before any check.
    """

    def __init__(self, raw: io.BufferedIOBase, index: Index) -> None:
        self.raw, self.index = raw, index

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self.index.expect(position)
        return self.raw.seek(position, whence)

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > TAR_HEADER_MAX_BYTES:
            raise UnsafeArchive(
                "Refused: a header in the tar archive is larger than "
                f"{filesizeformat(TAR_HEADER_MAX_BYTES)} (a damaged or forged archive)."
            )
        data = self.raw.read(size)
        self.index.expect(self.raw.tell())
        return data


@contextmanager
def _open(archive: Path, limits: Limits) -> Iterator[_Reader]:
    """The right reader for the archive's kind, its index checked; everything it opened is closed after."""
    with ExitStack() as stack:
        suffix = archive_suffix(archive.name)
        if suffix == ".zip":
            yield _Zip(archive, limits, stack)
        elif suffix in (".tar.gz", ".tgz", ".tar"):
            yield _Tar(archive, limits, stack, compressed=suffix != ".tar")
        else:
            raise UnsafeArchive("Refused: only .zip, .tar, .tar.gz and .tgz archives are accepted.")
