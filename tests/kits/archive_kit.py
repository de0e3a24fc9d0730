"""Building hostile archives for tests: explicit helpers and a hypothesis strategy (zip, tar, tar.gz)."""

from __future__ import annotations

import io
import stat
import struct
import tarfile
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from checkpoints.sources.archives import Limits

ARES = Path(__file__).resolve().parents[1] / "fixtures" / "ares"

# Small limits, so that generated archives reach every one of them quickly.
SMALL = Limits(max_bytes=3 * 1024 * 1024, max_members=12, max_ratio=100, max_depth=6, max_name_length=120)


def make_zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
    return path


def make_tar(path: Path, *members: tarfile.TarInfo | tuple[str, bytes], mode: str = "w:gz") -> Path:
    """A tar of (name, data) files and ready-made TarInfo entries (links, devices, folders)."""
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tarred:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tarred.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tarred.addfile(info, io.BytesIO(member[1]))
    return path


def tar_entry(name: str, kind: bytes, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def patch_zip(
    archive: Path, *, method: int | None = None, flags: int = 0, size: Callable[[int], int] | None = None
) -> Path:
    """Rewrite every member's headers as another tool (or a forger) might: compression method, flag
    bits, and the unpacked size the central directory declares."""
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zipped:
        infos, position = zipped.infolist(), zipped.start_dir
    for info in infos:
        struct.pack_into("<H", data, info.header_offset + 6, info.flag_bits | flags)
        if method is not None:
            struct.pack_into("<H", data, info.header_offset + 8, method)
    while data[position : position + 4] == b"PK\x01\x02":
        struct.pack_into("<H", data, position + 8, struct.unpack_from("<H", data, position + 8)[0] | flags)
        if method is not None:
            struct.pack_into("<H", data, position + 10, method)
        if size is not None:
            struct.pack_into("<I", data, position + 24, size(struct.unpack_from("<I", data, position + 24)[0]))
        name, extra, comment = struct.unpack_from("<HHH", data, position + 28)
        position += 46 + name + extra + comment
    archive.write_bytes(bytes(data))
    return archive


# ---- generated archives ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # file, folder, symlink, hardlink, device, fifo
    data: bytes = b""
    method: int = zipfile.ZIP_DEFLATED


@dataclass(frozen=True)
class HostileArchive:
    container: str  # zip, tar.gz or tar
    members: tuple[Member, ...]
    method: int | None  # zip: every member's method rewritten to this (99 = AES, 9 = deflate64, …)
    encrypted: bool  # zip: the encryption flag set
    lying: bool  # zip: the central directory declares half the real sizes
    damage: tuple[str, float] | None  # ("truncate" | "flip", where in the file)

    def build(self, folder: Path) -> Path:
        path = folder / f"upload.{self.container}"
        if self.container == "zip":
            self._zip(path)
        else:
            self._tar(path)
        if self.damage:
            data = bytearray(path.read_bytes())
            at = int(len(data) * self.damage[1])
            if self.damage[0] == "truncate":
                del data[at:]
            elif data:
                data[min(at, len(data) - 1)] ^= 0xFF
            path.write_bytes(bytes(data))
        return path

    def _zip(self, path: Path) -> None:
        modes = {"folder": stat.S_IFDIR, "device": stat.S_IFCHR, "fifo": stat.S_IFIFO}
        modes |= dict.fromkeys(["symlink", "hardlink"], stat.S_IFLNK)  # zip has no hard links
        with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as zipped:
            warnings.simplefilter("ignore")  # "Duplicate name": wanted here
            for member in self.members:
                name = member.name + ("/" if member.kind == "folder" and not member.name.endswith("/") else "")
                info = zipfile.ZipInfo(name)
                info.compress_type = member.method
                if member.kind in modes:
                    info.create_system = 3
                    info.external_attr = (modes[member.kind] | 0o755) << 16
                try:
                    zipped.writestr(info, member.data)
                except UnicodeEncodeError:  # a name zip cannot hold
                    continue
        if self.method is not None or self.encrypted or self.lying:
            patch_zip(
                path,
                method=self.method,
                flags=1 if self.encrypted else 0,
                size=(lambda n: n // 2) if self.lying else None,
            )

    def _tar(self, path: Path) -> None:
        kinds = {
            "folder": tarfile.DIRTYPE,
            "symlink": tarfile.SYMTYPE,
            "hardlink": tarfile.LNKTYPE,
            "device": tarfile.CHRTYPE,
            "fifo": tarfile.FIFOTYPE,
        }
        mode = "w:gz" if self.container == "tar.gz" else "w"
        with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tarred:
            for member in self.members:
                info = tarfile.TarInfo(member.name)
                info.type = kinds.get(member.kind, tarfile.REGTYPE)
                info.linkname = "/etc/passwd" if member.kind == "symlink" else "a"
                info.size = len(member.data) if member.kind == "file" else 0
                try:
                    tarred.addfile(info, io.BytesIO(member.data) if member.kind == "file" else None)
                except (ValueError, UnicodeEncodeError):  # a name or field tar cannot hold
                    continue


HOSTILE_NAMES = [
    "a", "a/b", "a/b/c", "b.json", "s/a_1.json", "./a", "a//b", "a/./b", "é/ü.json",
    "../x", "../../etc/passwd", "a/../../x", "/abs", "/etc/x", "C:/x", "C:x", "a\\..\\..\\x", "\\\\server\\x",
    "", ".", "..", "a\x00b", "a\nb", "a\x7fb", "\udcff.json", "x" * 300, "/".join(["d"] * 40), "y" * 120,
]  # fmt: skip

names = st.one_of(
    st.sampled_from(HOSTILE_NAMES),
    st.lists(st.sampled_from(["a", "b", "..", ".", "", "x" * 256, "\x00", "c.json"]), min_size=1, max_size=5).map(
        "/".join
    ),
    st.text(max_size=30),
)
contents = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([0, 1000, 64 * 1024, 1024 * 1024]).map(bytes),  # zeros: the best-compressing content
    st.sampled_from(sorted(ARES.iterdir())).map(Path.read_bytes),
)
members = st.builds(
    Member,
    name=names,
    kind=st.sampled_from(["file"] * 6 + ["folder", "symlink", "hardlink", "device", "fifo"]),
    data=contents,
    method=st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]),
)
ares_members = st.sampled_from(sorted(ARES.iterdir())).map(
    lambda path: Member(f"ares/{path.name}", "file", path.read_bytes())
)
hostile_archives = st.builds(
    HostileArchive,
    container=st.sampled_from(["zip", "tar.gz", "tar"]),
    members=st.lists(st.one_of(members, ares_members), max_size=14).map(tuple),
    method=st.one_of(st.none(), st.none(), st.sampled_from([99, 9, 95])),
    encrypted=st.sampled_from([False, False, False, True]),
    lying=st.sampled_from([False, False, False, True]),
    damage=st.one_of(
        st.none(), st.none(), st.tuples(st.sampled_from(["truncate", "flip"]), st.floats(0, 1, exclude_max=True))
    ),
)
plausible_archives = st.builds(  # checkpoint files an agent wrote, sometimes forged or damaged on the way
    HostileArchive,
    container=st.sampled_from(["zip", "tar.gz", "tar"]),
    members=st.lists(ares_members, min_size=1, max_size=10).map(tuple),
    method=st.none(),
    encrypted=st.just(False),
    lying=st.sampled_from([False, False, True]),
    damage=st.one_of(
        st.none(),
        st.none(),
        st.none(),
        st.tuples(st.sampled_from(["truncate", "flip"]), st.floats(0, 1, exclude_max=True)),
    ),
)
