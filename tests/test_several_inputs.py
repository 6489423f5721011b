"""Several inputs read as one text, through the CLI: a rotated set split from a real log (gzip,
bzip2, zstd and plain parts, the newest without its final newline) gives the answers, line
numbers and sql() results of the concatenated plain file; context_files, file_of and the
table's `file` column attribute each line to its part; a second question reuses the joined
copy; a damaged part is exit 3 naming it, or left out and said with --skip-bad; replay
--verify checks every part and names the one that changed."""

from __future__ import annotations

import bz2
import gzip
import json
import os
from pathlib import Path

import pytest
import zstandard
from conftest import latest_trace, run_cli, write_script

from rlm.input.order import Part, natural_key, order_paths

QUARTER = 2_500  # apache_logs has 10,000 lines: four parts of 2,500
# Oldest first: what each rotated file holds and how it is packed.
ROTATED = [
    ("access.log.3.gz", gzip.compress),
    ("access.log.2.bz2", bz2.compress),
    ("access.log.1.zst", zstandard.ZstdCompressor().compress),
    ("access.log", None),
]


@pytest.fixture
def rotated(tmp_path: Path, apache_log: Path) -> Path:
    """The rotated set in tmp_path/logs; the newest part lacks its final newline."""
    lines = apache_log.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4 * QUARTER
    folder = tmp_path / "logs"
    folder.mkdir()
    for i, (name, pack) in enumerate(ROTATED):
        data = b"".join(lines[i * QUARTER : (i + 1) * QUARTER])
        if pack is None:
            data = data.rstrip(b"\n")
        (folder / name).write_bytes(pack(data) if pack else data)
    return folder


def _given(folder: Path) -> list[str]:
    # Given newest first, shuffled: the reading order is rlm's to set.
    return [
        str(folder / n) for n in ("access.log", "access.log.2.bz2", "access.log.3.gz", "access.log.1.zst")
    ]


def _ask(cwd: Path, inputs: list[str], code: str, *extra: str) -> tuple[list[str], dict]:
    script = write_script(
        cwd / "s.json",
        [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "grep", "args": {"pattern": '" 404 ', "max_matches": 5}},
            {"tool": "peek", "args": {"start": QUARTER - 1, "length": 3}},
            {"tool": "peek", "args": {"start": 9_998, "length": 5}},
            {"tool": "final", "args": {"answer": "done"}},
            json.dumps({"answer": "done", "citations": ["F1"]}),
        ],
    )
    proc = run_cli(["ask", *inputs, "how many 404s?", "-m", script, *extra], cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    trace = latest_trace(cwd)
    return [s["observation"]["preview"] for s in trace["steps"][:4]], trace


SQL_404 = 'print(sql("SELECT count(*), max(line_no), sum(bytes) FROM log WHERE status = 404"))'


def test_the_parts_answer_as_the_concatenated_plain_file(
    tmp_path: Path, apache_log: Path, rotated: Path
) -> None:
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    plain_seen, _ = _ask(plain_dir, [str(apache_log)], SQL_404)
    seen, trace = _ask(tmp_path, _given(rotated), SQL_404)
    # peek and grep head each run of lines from one file with its name and the first line's
    # number in it; without those, sql(), grep's line numbers and peek across a part's boundary
    # and at the end are the plain file's.
    marks = [[line for line in obs.splitlines() if line.startswith("  ── ")] for obs in seen]
    assert [[m.rsplit("/", 1)[-1] for m in ms] for ms in marks] == [
        [],
        ["access.log.3.gz:63 ──"],  # the first 404s are in the oldest file
        ["access.log.3.gz:2,499 ──", "access.log.2.bz2:1 ──"],
        ["access.log:2,498 ──"],
    ], seen[1]
    unmarked = [[line for line in obs.splitlines() if not line.startswith("  ── ")] for obs in seen]
    assert unmarked == [obs.splitlines() for obs in plain_seen]
    not_found = [n for n, line in enumerate(apache_log.read_text().splitlines(), 1) if '" 404 ' in line]
    assert seen[0].splitlines()[2].split()[:3] == [str(len(not_found)), "|", str(not_found[-1])]
    inp = trace["input"]
    assert inp["lines"] == 10_000 and inp["format"] == "apache-access"
    # The newest part lacks its final newline: rlm adds it back, so the text is the plain file.
    assert inp["size"] == apache_log.stat().st_size
    parts = inp["parts"]
    assert [Path(p["name"]).name for p in parts] == [n for n, _ in ROTATED]
    assert [p["compression"] for p in parts] == ["gzip", "bzip2", "zstd", None]
    assert [(p["first_line"], p["last_line"]) for p in parts] == [
        (i * QUARTER + 1, (i + 1) * QUARTER) for i in range(4)
    ]
    for p in parts:
        on_disk = Path(p["path"])
        assert p["size"] == on_disk.stat().st_size
        assert p["sha256"] == __import__("hashlib").sha256(on_disk.read_bytes()).hexdigest()
    assert inp["skipped"] == []


def test_file_of_context_files_and_the_file_column_name_each_lines_part(
    tmp_path: Path, rotated: Path
) -> None:
    code = (
        'print(sql("SELECT file, count(*), min(line_no), max(line_no) FROM log GROUP BY file ORDER BY 3"))\n'
        "print([(f.name.rsplit('/', 1)[-1], f.first_line, f.last_line) for f in context_files])\n"
        "print([file_of(n).rsplit('/', 1)[-1] for n in (1, 2500, 2501, 7500, 7501, 10000)])\n"
        "print(grep('\" 404 ', 1))\n"
        'print(sql("SELECT file FROM log WHERE line_no = 5001")[0][0] == file_of(5001))'
    )
    seen, _ = _ask(tmp_path, _given(rotated), code)
    out = seen[0]
    rows = [line.split("|") for line in out.splitlines()[2:6]]
    assert [(Path(r[0].strip()).name, *(int(x) for x in r[1:])) for r in rows] == [
        (name, QUARTER, i * QUARTER + 1, (i + 1) * QUARTER) for i, (name, _) in enumerate(ROTATED)
    ]
    assert "[('access.log.3.gz', 1, 2500), ('access.log.2.bz2', 2501, 5000)" in out
    assert (
        "['access.log.3.gz', 'access.log.3.gz', 'access.log.2.bz2', 'access.log.1.zst', 'access.log', " in out
    )
    assert out.rstrip().endswith("True")
    assert "access.log.3.gz:63 ──" in out  # grep() in code names the file of what it echoes


def test_a_second_question_reuses_the_joined_copy(tmp_path: Path, rotated: Path) -> None:
    _, first = _ask(tmp_path, _given(rotated), "print(1)")
    joined = Path(first["input"]["path"])
    assert joined.parent == tmp_path / ".cache" and joined.suffix == ".plain"
    assert joined.stat().st_mode & 0o777 == 0o600
    before = (joined.stat().st_ino, joined.stat().st_mtime_ns)
    _, second = _ask(tmp_path, _given(rotated), "print(2)")
    assert second["input"]["path"] == str(joined)
    assert (joined.stat().st_ino, joined.stat().st_mtime_ns) == before


def test_a_quoted_glob_is_expanded_and_the_order_can_be_chosen(tmp_path: Path, rotated: Path) -> None:
    _, trace = _ask(tmp_path, ["logs/access.log*"], "print(1)")
    assert [p["name"] for p in trace["input"]["parts"]] == [f"logs/{n}" for n, _ in ROTATED]
    _, trace = _ask(tmp_path, ["logs/access.log*", "--order", "given"], "print(1)")
    # given: the glob's natural order, as the shell would list them.
    assert [p["name"] for p in trace["input"]["parts"]] == [
        "logs/access.log",
        "logs/access.log.1.zst",
        "logs/access.log.2.bz2",
        "logs/access.log.3.gz",
    ]


def _truncate(rotated: Path) -> Path:
    bad = rotated / "access.log.3.gz"
    bad.write_bytes(bad.read_bytes()[:20_000])
    return bad


def test_a_truncated_part_is_exit_3_naming_it(tmp_path: Path, rotated: Path) -> None:
    _truncate(rotated)
    proc = run_cli(["ask", *_given(rotated), "q?", "-m", "scripted/none.json"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "access.log.3.gz" in lines[0] and "not a whole gzip file" in lines[0]
    assert "Traceback" not in proc.stderr
    missing = run_cli(["ask", str(rotated / "access.log"), "nope.log", "q?", "-m", "x"], cwd=tmp_path)
    assert missing.returncode == 3 and "nope.log: no such file" in missing.stderr
    stdin_too = run_cli(["ask", "-", str(rotated / "access.log"), "q?", "-m", "x"], cwd=tmp_path)
    assert stdin_too.returncode == 2 and "stdin (-) can only be the one input" in stdin_too.stderr


def test_skip_bad_reads_on_and_says_what_it_skipped(tmp_path: Path, rotated: Path) -> None:
    _truncate(rotated)
    given = [*_given(rotated), str(rotated / "gone.log")]
    seen, trace = _ask(tmp_path, given, 'print(sql("SELECT count(*), min(line_no) FROM log"))', "--skip-bad")
    assert seen[0].splitlines()[2].split() == [str(3 * QUARTER), "|", "1"]
    inp = trace["input"]
    assert [Path(p["name"]).name for p in inp["parts"]] == [n for n, _ in ROTATED[1:]]
    why = {Path(s["name"]).name: s["why"] for s in inp["skipped"]}
    assert set(why) == {"access.log.3.gz", "gone.log"}
    assert "not a whole gzip file" in why["access.log.3.gz"] and why["gone.log"] == "no such file"
    said = [w for w in trace["warnings"] if "skipped 2" in str(w)]
    assert said, trace["warnings"]
    # The second run, from the cache, skips the same part and still says it; without
    # --skip-bad the cached build is no excuse: exit 3 naming it.
    _, again = _ask(tmp_path, given, "print(1)", "--skip-bad")
    assert again["input"]["skipped"] == inp["skipped"]
    proc = run_cli(["ask", *_given(rotated), "q?", "-m", "scripted/none.json"], cwd=tmp_path)
    assert proc.returncode == 3 and "access.log.3.gz" in proc.stderr


def test_the_stderr_line_and_the_profile_say_what_was_read(tmp_path: Path, rotated: Path) -> None:
    from rlm.input.parts import open_inputs

    with open_inputs(_given(rotated), cache_dir=str(tmp_path / "c")) as source:
        block = source.profile.prompt_block()
    assert "Read as one text: 4 files" in block
    assert "access.log.3.gz: lines 1-2,500, gzip" in block and "access.log: lines 7,501-10,000" in block
    assert "column `file`" in block
    script = write_script(
        tmp_path / "s.json", [{"tool": "final", "args": {"answer": "x"}}, '{"answer": "x"}']
    )
    proc = run_cli(["ask", *_given(rotated), "q?", "-m", script], cwd=tmp_path)
    said = [line for line in proc.stderr.splitlines() if line.startswith("rlm: read 4 files")]
    assert len(said) == 1 and "10,000 lines" in said[0], proc.stderr


def test_a_control_character_in_a_parts_name_reaches_no_terminal_raw(tmp_path: Path, rotated: Path) -> None:
    odd = rotated / "evil\x1b]0;pwned\x07.log"
    odd.write_bytes(b"one line\n")
    proc = run_cli(
        ["ask", str(rotated / "access.log"), str(odd), "q?", "-m", "x", "--skip-bad"], cwd=tmp_path
    )
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr


def test_replay_verify_checks_every_part_and_names_the_one_that_changed(
    tmp_path: Path, rotated: Path
) -> None:
    _ask(tmp_path, _given(rotated), SQL_404)
    ok = run_cli(["replay", "last", "--verify"], cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "4 files are the ones the run read" in ok.stdout
    changed = rotated / "access.log"
    changed.write_bytes(changed.read_bytes().replace(b'" 404 ', b'" 200 ', 1))
    bad = run_cli(["replay", "last", "--verify"], cwd=tmp_path)
    assert bad.returncode == 1
    assert "access.log has changed since the run" in bad.stdout
    assert "access.log.1.zst has changed" not in bad.stdout


def test_rotated_sets_read_oldest_first_others_as_given() -> None:
    def part(name: str, mtime: int = 0) -> Part:
        return Part(name=name, path=name, size=1, mtime_ns=mtime)

    given = [
        part(n) for n in ("b.txt", "x.log", "x.log.1", "x.log.10.gz", "x.log.2.gz", "a.txt", "part-00001")
    ]
    assert [p.name for p in order_paths(given, "auto")] == [
        "b.txt",
        "x.log.10.gz",
        "x.log.2.gz",
        "x.log.1",
        "x.log",
        "a.txt",
        "part-00001",
    ]
    assert sorted(["a10", "a2", "a1"], key=natural_key) == ["a1", "a2", "a10"]
    timed = [part("new", 3), part("old", 1), part("mid", 2)]
    assert [p.name for p in order_paths(timed, "mtime")] == ["old", "mid", "new"]
    assert [p.name for p in order_paths(timed, "name")] == ["mid", "new", "old"]
    assert os.sep  # the names are compared as given: no path is resolved here


def test_a_window_sees_its_files_cut_and_numbered_as_its_own_lines() -> None:
    from rlm.sandbox.worker.files import file_case, file_of_helper, part_locator, window_parts

    parts = [["a.log.2.gz", 1, 100], ["a.log.1", 101, 250], ["a.log", 251, 300]]
    # A child over lines 150-260 of the whole: its line 1 is line 150.
    window = window_parts(parts, 150, 260)
    assert [tuple(p) for p in window] == [("a.log.1", 1, 101), ("a.log", 102, 111)]
    file_of = file_of_helper(window, 111)
    assert [file_of(n) for n in (1, 101, 102, 111)] == ["a.log.1", "a.log.1", "a.log", "a.log"]
    with pytest.raises(ValueError, match="line numbers run from 1 to 111"):
        file_of(112)
    # peek's heading counts from the file's own first line, not from the window's cut.
    part_of = part_locator(parts, 150)
    assert part_of is not None and part_of(1) == ("a.log.1", 50) and part_of(102) == ("a.log", 1)
    assert part_locator(None, None) is None
    assert file_case(parts) == (
        "CASE WHEN line_no <= 250 THEN CASE WHEN line_no <= 100 THEN 'a.log.2.gz' ELSE 'a.log.1' END "
        "ELSE 'a.log' END"
    )


def test_partition_map_by_file_asks_once_per_file_and_lines_of_gives_its_lines(
    tmp_path: Path, apache_log: Path
) -> None:
    lines = apache_log.read_bytes().splitlines(keepends=True)
    small = tmp_path / "small"
    small.mkdir()
    for i, (name, pack) in enumerate(ROTATED):  # 20 lines a file: one plain sub-call each
        data = b"".join(lines[i * 20 : (i + 1) * 20])
        (small / name).write_bytes(pack(data) if pack else data)
    code = (
        'print(partition_map("how many lines?", by="file"))\n'
        'part = lines_of("access.log.2.bz2")\n'
        "print(len(part), part[0] == context_lines[20], part[-1] == context_lines[39])"
    )
    script = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {"tool": "execute", "args": {"code": code}},
                {"tool": "final", "args": {"answer": "done"}},
                json.dumps({"answer": "done", "citations": ["F1"]}),
            ],
            # each sub-call says which file and lines it was shown
            "rules": [{"match": r"/(access\.log[^,/]*), lines ([\d,]+-[\d,]+)", "reply": r"\1 \2"}],
        },
    )
    proc = run_cli(["ask", *_given(small), "lines per file?", "-m", script], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = latest_trace(tmp_path)["steps"][0]["observation"]["preview"].splitlines()
    assert out[0] == str([f"{name} {i * 20 + 1}-{i * 20 + 20}" for i, (name, _) in enumerate(ROTATED)]), out
    assert out[1] == "20 True True"
