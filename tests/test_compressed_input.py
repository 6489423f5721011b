"""Compressed inputs through the CLI: gzip, bzip2, xz and zstd, recognised by their first bytes,
give the same answers, line numbers and sql() results as the plain file; a second question
reads the decompressed copy in the cache; a damaged file is one line and exit 3."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from conftest import DATA, latest_trace, run_cli, write_script

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}
SUFFIX = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}


def _script(tmp_path: Path) -> str:
    return write_script(
        tmp_path / "s.json",
        [
            {
                "tool": "execute",
                "args": {"code": 'print(sql("SELECT count(*), max(line_no) FROM log WHERE status = 404"))'},
            },
            {"tool": "grep", "args": {"pattern": '" 404 ', "max_matches": 5}},
            {"tool": "peek", "args": {"start": 9_996, "length": 5}},
            {"tool": "final", "args": {"answer": "done"}},
            json.dumps({"answer": "done", "citations": ["F1"]}),
        ],
    )


def _observations(tmp_path: Path, path: Path) -> tuple[list[str], dict]:
    proc = run_cli(["ask", str(path), "how many 404s?", "-m", _script(tmp_path)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    trace = latest_trace(tmp_path)
    return [s["observation"]["preview"] for s in trace["steps"][:3]], trace


@pytest.mark.parametrize("codec", list(COMPRESS))
def test_a_compressed_log_answers_as_the_plain_one(tmp_path: Path, apache_log: Path, codec: str) -> None:
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    plain_seen, _ = _observations(plain_dir, apache_log)
    packed = tmp_path / f"apache_logs{SUFFIX[codec]}"
    packed.write_bytes(COMPRESS[codec](apache_log.read_bytes()))
    seen, trace = _observations(tmp_path, packed)
    # sql(), grep's line numbers and peek: the same as over the plain file.
    assert seen == plain_seen
    not_found = [n for n, line in enumerate(apache_log.read_text().splitlines(), 1) if '" 404 ' in line]
    assert seen[0].splitlines()[2].split() == [str(len(not_found)), "|", str(not_found[-1])]
    assert trace["input"]["compression"] == codec and trace["input"]["format"] == "apache-access"
    assert trace["input"]["plain_size"] == apache_log.stat().st_size
    assert trace["input"]["size"] == packed.stat().st_size


def test_the_first_bytes_decide_not_the_name(tmp_path: Path) -> None:
    csv_plain = DATA / "seaborn" / "taxis.csv"
    unnamed = tmp_path / "export-2026-11"  # no suffix at all
    unnamed.write_bytes(gzip.compress(csv_plain.read_bytes()))
    named = tmp_path / "trips.csv.zst"
    named.write_bytes(COMPRESS["zstd"](csv_plain.read_bytes()))
    for path in (unnamed, named):
        model = write_script(
            tmp_path / "s.json",
            [
                {"tool": "execute", "args": {"code": 'print(sql("SELECT count(*) FROM log")[0][0])'}},
                {"tool": "final", "args": {"answer": "6433"}},
                json.dumps({"answer": "6433", "citations": ["F1"]}),
            ],
        )
        proc = run_cli(["ask", str(path), "how many trips?", "-m", model], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "6433"
        trace = latest_trace(tmp_path)
        assert (
            trace["input"]["format"] == "csv"
            and trace["steps"][0]["observation"]["preview"].strip() == "6433"
        )


def test_concatenated_members_are_read_through(tmp_path: Path, apache_log: Path) -> None:
    data = apache_log.read_bytes()
    half = data.index(b"\n", len(data) // 2) + 1
    both = tmp_path / "rotated.gz"
    both.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))  # as `cat a.gz b.gz`
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    plain_seen, _ = _observations(plain_dir, apache_log)
    seen, trace = _observations(tmp_path, both)
    assert seen == plain_seen and trace["input"]["lines"] == data.count(b"\n")


def test_a_second_question_reads_the_copy_already_decompressed(tmp_path: Path, apache_log: Path) -> None:
    packed = tmp_path / "apache_logs.xz"
    packed.write_bytes(lzma.compress(apache_log.read_bytes()))
    _observations(tmp_path, packed)
    copies = list((tmp_path / ".cache").rglob("*.plain"))
    assert len(copies) == 1 and copies[0].read_bytes() == apache_log.read_bytes()
    assert copies[0].stat().st_mode & 0o777 == 0o600  # the user's alone, like every cache entry
    before = copies[0].stat()
    _observations(tmp_path, packed)
    after = copies[0].stat()
    # Not written again: the same file (a new copy would take its place under a new inode).
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize("codec", list(COMPRESS))
def test_a_truncated_file_is_one_line_naming_it_and_exit_3(
    tmp_path: Path, apache_log: Path, codec: str
) -> None:
    whole = COMPRESS[codec](apache_log.read_bytes())
    cut = tmp_path / f"download{SUFFIX[codec]}"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    proc = run_cli(["ask", str(cut), "how many 404s?", "-m", _script(tmp_path)], cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stdout == ""
    line = proc.stderr.strip()
    assert line.startswith(f"rlm: {cut} is not a whole {codec} file: reading stopped near byte ")
    assert "\n" not in line and "Traceback" not in proc.stderr
    # Nothing half-decompressed is left in the cache to be taken for the whole file next time.
    assert [p.name for p in (tmp_path / ".cache").rglob("*") if p.is_file() and ".plain" in p.name] == []


def test_a_file_that_would_fill_the_disk_stops_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlm.errors import InputError
    from rlm.input import compressed

    bomb = tmp_path / "zeros.bz2"
    bomb.write_bytes(bz2.compress(bytes(256 << 20)))  # 256 MiB of zeros in a few hundred bytes
    assert bomb.stat().st_size < 2_000
    # As if the disk had only what it has now less a little: the margin is not there to give.
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    monkeypatch.setattr(compressed, "DISK_MARGIN", free - (8 << 20))
    out = tmp_path / "plain"
    with open(out, "wb") as fh, pytest.raises(InputError, match="decompresses to more than the disk holds"):
        compressed.decompress(str(bomb), "bzip2", fh, display=str(bomb))
    assert out.stat().st_size < 8 << 20


def test_a_zstd_bomb_is_decompressed_in_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "zeros.zst"
    bomb.write_bytes(zstandard.ZstdCompressor(level=19).compress(bytes(1 << 30)))  # 1 GiB of zeros
    probe = (
        "import resource, sys\n"
        "from rlm.input.compressed import decompress\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "n = decompress(sys.argv[1], 'zstd', open('/dev/null', 'wb'), display='bomb')\n"
        "print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(bomb)], capture_output=True, text=True, check=True)
    written, grown_kb = map(int, out.stdout.split())
    assert written == 1 << 30
    assert grown_kb < 64 * 1024, f"peak memory grew {grown_kb:,} KB"  # 8 KiB feeds grew it ~520 MB
