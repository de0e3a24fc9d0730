from __future__ import annotations

import gzip
import io
import shutil
import tarfile
import tempfile
import tracemalloc
import zipfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints.sources.archives import Index, Limits, UnsafeArchive, check, extract
from tests.kits.archive_kit import (
    SMALL,
    HostileArchive,
    hostile_archives,
    make_tar,
    make_zip,
    patch_zip,
    tar_entry,
)

MiB = 1024 * 1024


def nothing_in(folder: Path) -> bool:
    return not folder.exists() or not any(folder.rglob("*"))


def refusal(archive: Path, out: Path, limits: Limits | None = None) -> str:
    """The sentence `extract` refuses the archive with, having written nothing."""
    with pytest.raises(UnsafeArchive) as refused:
        extract(archive, out, limits)
    assert nothing_in(out)
    return str(refused.value)


# ---- clean archives -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["w:gz", "w"])
def test_a_clean_zip_and_tar_unpack_into_the_target(tmp_path, mode):
    out = tmp_path / "out"
    assert extract(make_zip(tmp_path / "a.zip", {"s/a_1.json": b"{}", "s/a_2.json": b"[]"}), out) == 2
    assert (out / "s" / "a_2.json").read_bytes() == b"[]"
    name = "b.tar.gz" if mode == "w:gz" else "b.tar"
    tar = make_tar(tmp_path / name, tar_entry(".", tarfile.DIRTYPE), ("./x/y.json", b"{}"), mode=mode)
    assert extract(tar, tmp_path / "out2") == 1
    assert (tmp_path / "out2" / "x" / "y.json").read_bytes() == b"{}"


def test_check_reads_the_index_and_writes_nothing(tmp_path):
    archive = make_zip(tmp_path / "a.zip", {"s/a_1.json": b"{}", "s/b/a_2.json": b"[1]"})
    index = check(archive)
    assert sorted(map(str, index.files)) == ["s/a_1.json", "s/b/a_2.json"]
    assert (index.members, index.declared_bytes) == (2, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]


def test_stored_bzip2_and_lzma_members_unpack_too(tmp_path):
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        archive = make_zip(tmp_path / f"{method}.zip", {"a.json": b'{"k": 1}'}, compression=method)
        assert extract(archive, tmp_path / f"out{method}") == 1


def test_the_limits_come_from_the_settings(tmp_path, settings):
    archive = make_zip(tmp_path / "many.zip", {f"f{i}.json": b"{}" for i in range(5)})
    settings.IMPORT_ARCHIVE_MAX_MEMBERS = 4
    assert "more than 4 files and folders" in refusal(archive, tmp_path / "out")
    settings.IMPORT_ARCHIVE_MAX_MEMBERS = 5
    assert extract(archive, tmp_path / "out") == 5


# ---- regressions from issue #9 (item 6) -----------------------------------------------------------


def test_200_members_of_exactly_one_mib_in_a_small_zip_are_refused_before_anything_is_written(tmp_path):
    archive = make_zip(tmp_path / "bomb.zip", {f"f{n}.json": bytes(MiB) for n in range(200)})
    assert archive.stat().st_size < 300_000  # ≈ 930× once unpacked
    assert "built to fill up disks" in refusal(archive, tmp_path / "out")


def test_a_zip_member_with_compression_method_99_is_refused_with_a_sentence(tmp_path):
    archive = patch_zip(make_zip(tmp_path / "aes.zip", {"a.json": b"{}"}), method=99)
    message = refusal(archive, tmp_path / "out")
    assert message == (
        "Refused: 'a.json' is compressed in a way this console cannot read (zip method 99); "
        "save the archive again as a plain zip."
    )


def test_a_file_and_a_folder_of_the_same_name_are_refused(tmp_path):
    archive = make_zip(tmp_path / "clash.zip", {"a": b"{}", "a/b": b"{}"})
    assert refusal(archive, tmp_path / "out") == "Refused: 'a/b' is both a file and a folder in the archive."


def test_a_tar_refusal_never_shows_a_server_path(tmp_path):
    archive = make_tar(tmp_path / "paths.tar.gz", ("a", b"{}"), ("a/b", b"{}"), ("x" * 300, b"{}"))
    message = refusal(archive, tmp_path / "out")
    assert str(tmp_path) not in message and "/tmp" not in message and "out/" not in message  # noqa: S108 - asserts the path is absent


# ---- every refusal, each before anything is written -----------------------------------------------


def empty_file(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def one_mib_zeros_tar(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "bomb.tar.gz", *[(f"f{n}.json", bytes(MiB)) for n in range(8)])


REFUSED = {
    "traversal": (lambda p: make_zip(p / "t.zip", {"ok.json": b"{}", "../evil.json": b"{}"}), "outside the upload"),
    "nested traversal": (lambda p: make_zip(p / "t.zip", {"a/../../evil.json": b"{}"}), "outside the upload"),
    "absolute": (lambda p: make_tar(p / "t.tar.gz", ("/etc/evil.json", b"{}")), "outside the upload"),
    "drive": (lambda p: make_zip(p / "t.zip", {"C:/evil.json": b"{}"}), "outside the upload"),
    "backslashes": (lambda p: make_zip(p / "t.zip", {"..\\..\\evil.json": b"{}"}), "outside the upload"),
    "symlink": (
        lambda p: make_tar(p / "l.tgz", tar_entry("state.json", tarfile.SYMTYPE, linkname="/etc/passwd")),
        "'state.json' is a link",
    ),
    "hard link": (lambda p: make_tar(p / "l.tgz", ("a", b"{}"), tar_entry("b", tarfile.LNKTYPE, linkname="a")), "link"),
    "device": (lambda p: make_tar(p / "d.tar", tar_entry("null", tarfile.CHRTYPE), mode="w"), "special file"),
    "fifo": (lambda p: make_tar(p / "d.tgz", tar_entry("pipe", tarfile.FIFOTYPE)), "special file"),
    "sparse": (lambda p: make_tar(p / "s.tar", tar_entry("holes", tarfile.GNUTYPE_SPARSE), mode="w"), "special file"),
    "duplicate": (lambda p: make_tar(p / "d.tgz", ("a.json", b"{}"), ("./a.json", b"[]")), "appears twice"),
    "folder then file": (
        lambda p: make_tar(p / "c.tgz", ("a/b", b"{}"), ("a", b"{}")),
        "'a' is both a file and a folder",
    ),
    "file then folder entry": (
        lambda p: make_tar(p / "c.tgz", ("a", b"{}"), tar_entry("a", tarfile.DIRTYPE)),
        "both a file and a folder",
    ),
    "deep": (lambda p: make_zip(p / "d.zip", {"/".join(["d"] * 40): b"{}"}), "nested 40 levels deep"),
    "long name": (lambda p: make_zip(p / "l.zip", {"d/" * 600 + "x": b"{}"}), "1,201 characters long"),
    "long part": (lambda p: make_tar(p / "l.tgz", ("x" * 300, b"{}")), "longer than 255 bytes"),
    "control character": (lambda p: make_zip(p / "c.zip", {"a\nb.json": b"{}"}), "control character"),
    "not UTF-8": (lambda p: make_tar(p / "u.tar", ("\udcff.json", b"{}"), mode="w"), "not readable text (not UTF-8)"),
    "encrypted": (
        lambda p: patch_zip(make_zip(p / "e.zip", {"a.json": b"{}"}), flags=1),
        "'a.json' is encrypted; upload an archive without a password",
    ),
    "unknown method": (lambda p: patch_zip(make_zip(p / "m.zip", {"a.json": b"{}"}), method=95), "(zip method 95)"),
    "deflate64": (lambda p: patch_zip(make_zip(p / "m.zip", {"a.json": b"{}"}), method=9), "(zip method 9)"),
    "small zip bomb member": (
        lambda p: make_zip(p / "b.zip", {"zeros.json": bytes(64 * 1024)}),
        "× its compressed size, more than the limit of 100×: files that swell",  # ≈ 840×, at only 64 KiB
    ),
    "tar bomb": (one_mib_zeros_tar, "more than 100× its own size"),
    "empty zip": (lambda p: make_zip(p / "e.zip", {}), "the archive holds no files"),
    "folders only": (lambda p: make_tar(p / "e.tgz", tar_entry("a", tarfile.DIRTYPE)), "holds no files"),
    "empty file": (lambda p: empty_file(p / "e.tar.gz"), "Refused: the file is empty."),
}


@pytest.mark.parametrize("case", REFUSED)
def test_unsafe_archives_are_refused_with_a_sentence_before_anything_is_written(tmp_path, case):
    make, expected = REFUSED[case]
    archive = make(tmp_path)
    with pytest.raises(UnsafeArchive) as at_check:
        check(archive)
    message = refusal(archive, tmp_path / "out")
    assert expected in message
    assert message == str(at_check.value)
    assert message.startswith("Refused: ") and message.endswith(".") and "\n" not in message
    assert str(tmp_path) not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == [archive.name]


def test_too_many_members_or_bytes_are_refused(tmp_path):
    archive = make_zip(tmp_path / "many.zip", {f"f{i}.json": b"{}" for i in range(20)})
    limits = Limits.from_settings()
    assert "more than 10 files and folders" in refusal(archive, tmp_path / "out", replace(limits, max_members=10))
    assert "unpacks to more than 10\xa0bytes, the limit" in refusal(
        archive, tmp_path / "out", replace(limits, max_bytes=10)
    )


def test_a_zip_with_a_huge_central_directory_is_refused_without_reading_it_all(tmp_path):
    archive = tmp_path / "entries.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for n in range(20_000):
            zipped.writestr(zipfile.ZipInfo(format(n, "x")), b"")
    tracemalloc.start()
    try:
        assert "more than 100 files and folders" in refusal(archive, tmp_path / "out", replace(SMALL, max_members=100))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # ZipFile would first build all 20,000 entries: ~11 MB


def test_a_tar_header_declaring_a_huge_size_is_refused_without_decompressing(tmp_path):
    info = tarfile.TarInfo("huge.json")
    info.size = 50 * 1024**3
    raw = io.BytesIO()
    raw.write(info.tobuf(tarfile.PAX_FORMAT))
    archive = tmp_path / "huge.tar.gz"
    archive.write_bytes(gzip.compress(raw.getvalue()))
    assert "unpacks to more than 2.0\xa0GB, the limit" in refusal(archive, tmp_path / "out")


def test_a_tar_with_a_gigantic_pax_header_is_refused_before_reading_it(tmp_path):
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 64 * MiB
    archive = tmp_path / "pax.tar.gz"
    with gzip.open(archive, "wb") as out:
        out.write(header.tobuf(tarfile.USTAR_FORMAT))
        for _ in range(64):
            out.write(bytes(MiB))
    assert "a header in the tar archive is larger than 1.0\xa0MB" in refusal(archive, tmp_path / "out")


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("broken.zip", b"PK\x03\x04 not really", "this file is not a zip archive, or it is truncated"),
        ("broken.tar.gz", b"\x1f\x8b junk", "damaged or truncated"),
        ("plain.tar.gz", b"not gzip at all" * 50, "not a gzip-compressed tar archive"),
        ("plain.tar", b"not a tar at all" * 50, "damaged or truncated"),
    ],
)
def test_files_that_are_no_archive_are_refused_with_a_sentence(tmp_path, name, data, expected):
    archive = tmp_path / name
    archive.write_bytes(data)
    assert expected in refusal(archive, tmp_path / "out")


@pytest.mark.parametrize("name", ["runs.zip", "runs.tar.gz", "runs.tar"])
def test_truncated_archives_are_refused_at_the_check(tmp_path, name):
    members = [(f"s/a_{n}.json", b'{"step": %d}' % n * 200) for n in range(10)]
    if name.endswith(".zip"):
        archive = make_zip(tmp_path / name, dict(members))
    else:
        archive = make_tar(tmp_path / name, *members, mode="w:gz" if name.endswith(".gz") else "w")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size * 2 // 3])
    assert "truncated" in refusal(archive, tmp_path / "out")


def test_data_spliced_after_a_tars_last_member_is_refused(tmp_path):
    archive = make_tar(tmp_path / "spliced.tar", ("a.json", b"{}"), mode="w")
    archive.write_bytes(archive.read_bytes()[:1024] + b"garbage" * 100 + bytes(10240))
    assert "damaged or truncated" in refusal(archive, tmp_path / "out")


def test_a_zip_whose_header_understates_a_member_stops_at_the_declared_size(tmp_path):
    real = b'{"messages": ["' + b"x" * 5000 + b'"]}'
    archive = patch_zip(make_zip(tmp_path / "lies.zip", {"a.json": real}), size=lambda n: 100)
    assert check(archive).files == {PurePosixPath("a.json"): 100}  # the index cannot tell
    out = tmp_path / "out"
    with pytest.raises(UnsafeArchive, match="zip archive is damaged or truncated"):
        extract(archive, out)
    assert all(path.stat().st_size <= 100 for path in out.rglob("*") if path.is_file())


def test_other_file_types_are_refused(tmp_path):
    archive = tmp_path / "states.rar"
    archive.write_bytes(b"x")
    assert refusal(archive, tmp_path / "out") == "Refused: only .zip, .tar, .tar.gz and .tgz archives are accepted."


# ---- generated hostile archives -------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=hostile_archives)
def test_generated_hostile_archives_are_refused_with_a_sentence_or_unpacked_inside_the_target(tmp_path, spec):
    """Random names (.., absolute, NUL, long, duplicates, file/folder clashes), links, devices, sizes,
    compression methods, encryption, lying sizes and damage: never another exception, never a byte
    outside the target, never a server path in the message."""
    example = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        archive = spec.build(example)
        out = example / "work" / "out"
        index = _unpack_or_refuse(archive, out, spec, tmp_path)
        outside = set(tmp_path.rglob("*")) - {archive, example, out.parent, out, *out.rglob("*")}
        assert not outside
        assert index is not None or nothing_in(out)  # refused from its index: nothing was unpacked
    finally:
        shutil.rmtree(example)


def _unpack_or_refuse(archive: Path, out: Path, spec: HostileArchive, tmp_path: Path) -> Index | None:
    """Check, then extract; return the index when the check passed."""
    try:
        index = check(archive, SMALL)
    except UnsafeArchive as refused:
        assert_plain(str(refused), tmp_path)
        index = None
    try:
        written = extract(archive, out, SMALL)
    except UnsafeArchive as refused:
        assert_plain(str(refused), tmp_path)
        return index
    assert index is not None
    files = {path.relative_to(out).as_posix(): path for path in out.rglob("*") if path.is_file()}
    assert written == len(files) == len(index.files)
    assert sorted(files) == sorted(map(str, index.files))
    expected = expected_contents(spec)
    for name, path in files.items():
        assert path.resolve().is_relative_to(out.resolve())
        if not (spec.damage and spec.container == "tar"):  # a plain tar has no checksum over its data
            assert path.read_bytes() == expected[name]
    return index


def assert_plain(message: str, tmp_path: Path) -> None:
    assert message.endswith(".") and "\n" not in message
    assert message.startswith(("Refused: ", "The server could not unpack"))
    assert str(tmp_path) not in message and "/tmp" not in message  # noqa: S108 - asserts the path is absent


def expected_contents(spec: HostileArchive) -> dict[str, bytes]:
    """What each unpacked file must hold, by name: tar cuts a name at a NUL, zip refuses it."""
    names = (m.name.split("\0")[0].replace("\\", "/") for m in spec.members)
    return {str(PurePosixPath(name)): m.data for name, m in zip(names, spec.members, strict=True) if m.kind == "file"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(["a", "a/b", "a/b/c", "b", "b/a", "./a", "a//b"]), min_size=1, max_size=6))
def test_a_name_is_never_both_a_file_and_a_folder_whatever_the_order(tmp_path, names):
    example = Path(tempfile.mkdtemp(dir=tmp_path))
    archive = make_tar(example / "n.tgz", *[(name, b"{}") for name in names])
    paths = [PurePosixPath(name) for name in names]
    clash = len(set(paths)) < len(paths) or any(p in q.parents for p in paths for q in paths)
    try:
        extract(archive, example / "out")
    except UnsafeArchive as refused:
        assert clash, str(refused)
        assert "appears twice" in str(refused) or "both a file and a folder" in str(refused)
    else:
        assert not clash
