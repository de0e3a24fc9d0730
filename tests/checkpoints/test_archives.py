from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from checkpoints.archives import UnsafeArchive, extract


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
    return path


def make_tar(path: Path, add) -> Path:  # type: ignore[no-untyped-def]
    with tarfile.open(path, "w:gz") as tarred:
        add(tarred)
    return path


def file_member(tarred: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tarred.addfile(info, io.BytesIO(data))


def test_a_clean_zip_and_tar_unpack_into_the_target(tmp_path):
    out = tmp_path / "out"
    assert extract(make_zip(tmp_path / "a.zip", {"s/a_1.json": b"{}", "s/a_2.json": b"[]"}), out) == 2
    assert (out / "s" / "a_2.json").read_bytes() == b"[]"
    tar = make_tar(tmp_path / "b.tar.gz", lambda t: file_member(t, "x/y.json", b"{}"))
    assert extract(tar, tmp_path / "out2") == 1


@pytest.mark.parametrize("name", ["../evil.json", "/etc/evil.json", "a/../../evil.json", "C:/evil.json"])
def test_members_that_would_land_outside_are_refused_before_anything_is_written(tmp_path, name):
    archive = make_zip(tmp_path / "bad.zip", {"ok.json": b"{}", name: b"{}"})
    with pytest.raises(UnsafeArchive, match="outside the upload folder"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))
    assert not (tmp_path / "evil.json").exists()


def test_links_in_a_tar_are_refused(tmp_path):
    def add(tarred):  # type: ignore[no-untyped-def]
        link = tarfile.TarInfo("state.json")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tarred.addfile(link)

    with pytest.raises(UnsafeArchive, match="link"):
        extract(make_tar(tmp_path / "l.tgz", add), tmp_path / "out")


def test_a_zip_bomb_is_refused(tmp_path):
    archive = make_zip(tmp_path / "bomb.zip", {"zeros.json": b"0" * (20 * 1024 * 1024)})
    assert archive.stat().st_size < 100_000
    with pytest.raises(UnsafeArchive, match="zip bomb"):
        extract(archive, tmp_path / "out")


def test_too_many_files_or_bytes_are_refused(tmp_path):
    archive = make_zip(tmp_path / "many.zip", {f"f{i}.json": b"{}" for i in range(20)})
    with pytest.raises(UnsafeArchive, match="more than the limit of 10"):
        extract(archive, tmp_path / "out", max_files=10)
    with pytest.raises(UnsafeArchive, match="bytes unpacked"):
        extract(archive, tmp_path / "out", max_bytes=10)


@pytest.mark.parametrize(
    ("name", "data"), [("broken.zip", b"PK\x03\x04 not really"), ("broken.tar.gz", b"\x1f\x8b junk")]
)
def test_corrupt_archives_are_refused_with_a_message(tmp_path, name, data):
    archive = tmp_path / name
    archive.write_bytes(data)
    with pytest.raises(UnsafeArchive, match="not a readable"):
        extract(archive, tmp_path / "out")


def test_other_file_types_are_refused(tmp_path):
    archive = tmp_path / "states.rar"
    archive.write_bytes(b"x")
    with pytest.raises(UnsafeArchive, match="only .zip"):
        extract(archive, tmp_path / "out")


# ---- regressions from issue #9 (item 6) -----------------------------------------------------------

import struct  # noqa: E402


def patch_zip(archive: Path, *, method: int | None = None, flags: int = 0) -> Path:
    """Rewrite each member's compression method and/or set flag bits in both its headers, as another tool might."""
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
        name, extra, comment = struct.unpack_from("<HHH", data, position + 28)
        position += 46 + name + extra + comment
    archive.write_bytes(bytes(data))
    return archive


def test_200_members_of_exactly_one_mib_in_a_small_zip_are_refused_before_anything_is_written(tmp_path):
    archive = make_zip(tmp_path / "bomb.zip", {f"f{n}.json": bytes(1024 * 1024) for n in range(200)})
    assert archive.stat().st_size < 300_000  # ≈ 930× once unpacked
    out = tmp_path / "out"
    with pytest.raises(UnsafeArchive, match="bomb"):
        extract(archive, out)
    assert not out.exists() or not any(out.rglob("*"))


def test_a_zip_member_with_compression_method_99_is_refused_with_a_sentence(tmp_path):
    archive = patch_zip(make_zip(tmp_path / "aes.zip", {"a.json": b"{}"}), method=99)
    with pytest.raises(UnsafeArchive, match="compression method"):
        extract(archive, tmp_path / "out")


def test_a_file_and_a_folder_of_the_same_name_are_refused(tmp_path):
    archive = make_zip(tmp_path / "clash.zip", {"a": b"{}", "a/b": b"{}"})
    with pytest.raises(UnsafeArchive, match="both a file and a folder"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


def test_a_tar_refusal_never_shows_a_server_path(tmp_path):
    def add(tarred):  # type: ignore[no-untyped-def]
        file_member(tarred, "a", b"{}")
        file_member(tarred, "a/b", b"{}")
        file_member(tarred, "x" * 300, b"{}")

    out = tmp_path / "out"
    with pytest.raises(UnsafeArchive) as refused:
        extract(make_tar(tmp_path / "paths.tar.gz", add), out)
    assert str(tmp_path) not in str(refused.value) and "out/" not in str(refused.value)
