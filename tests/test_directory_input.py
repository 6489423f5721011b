"""A directory as input, and --files-from, through the CLI: a tree split from a real log (a rotated
set, gzip among it, a nested folder) with .gitignore files at two levels and a binary file reads
as the concatenated plain text of the files git would keep; the binary is skipped and said;
--include, --exclude and --max-file-mb choose; a list of files (lines, or NUL-separated on stdin)
reads as the same files given one by one."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import latest_trace, run_cli, write_script

THIRD = 3_000  # of apache_logs' 10,000 lines: three parts of 3,000, the rest in a nested folder


@pytest.fixture
def tree(tmp_path: Path, apache_log: Path) -> Path:
    lines = apache_log.read_bytes().splitlines(keepends=True)
    root = tmp_path / "logs"
    (root / "old" / "build").mkdir(parents=True)
    (root / "app.log.2.gz").write_bytes(gzip.compress(b"".join(lines[:THIRD])))
    (root / "app.log.1").write_bytes(b"".join(lines[THIRD : 2 * THIRD]))
    (root / "app.log").write_bytes(b"".join(lines[2 * THIRD : 3 * THIRD]))
    (root / "old" / "web.log").write_bytes(b"".join(lines[3 * THIRD :]))
    # What git would not keep: by the top .gitignore, by the nested one, and .git itself.
    (root / ".gitignore").write_text("*.tmp\nbuild/\n")
    (root / "scratch.tmp").write_bytes(lines[0] * 50)
    (root / "old" / "build" / "out.log").write_bytes(lines[1] * 50)
    (root / "old" / ".gitignore").write_text("secret.log\n")
    (root / "old" / "secret.log").write_bytes(lines[2] * 50)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    # A binary file: skipped and counted.
    (root / "core.dump").write_bytes(b"\x7fELF\x00\x01" + bytes(range(256)) * 8)
    return root


def _ask(cwd: Path, args: list[str], *extra: str, stdin: bytes | None = None) -> tuple[dict, str]:
    script = write_script(
        cwd / "s.json",
        [
            {
                "tool": "execute",
                "args": {
                    "code": 'print(len(context_lines), sql("SELECT count(*) FROM log WHERE status = 404")[0][0])\n'
                    "print([(f.name.rsplit('/', 1)[-1], f.first_line, f.last_line) for f in context_files])"
                },
            },
            {"tool": "final", "args": {"answer": "done"}},
            json.dumps({"answer": "done", "citations": ["F1"]}),
        ],
    )
    proc = run_cli(["ask", *args, "how many 404s?", "-m", script, *extra], cwd=cwd, stdin=stdin)
    out = proc.stdout.decode() if isinstance(proc.stdout, bytes) else proc.stdout
    err = proc.stderr.decode() if isinstance(proc.stderr, bytes) else proc.stderr
    assert proc.returncode == 0, err
    assert out.strip() == "done"
    return latest_trace(cwd), err


def test_a_directory_reads_as_the_files_git_would_keep_in_order(
    tmp_path: Path, apache_log: Path, tree: Path
) -> None:
    trace, err = _ask(tmp_path, [str(tree)])
    parts = trace["input"]["parts"]
    assert [Path(p["name"]).relative_to(tree).as_posix() for p in parts] == [
        "app.log.2.gz",
        "app.log.1",
        "app.log",
        "old/web.log",
    ]
    assert [p["compression"] for p in parts] == ["gzip", None, None, None]
    plain = apache_log.read_text().splitlines()
    not_found = sum(1 for line in plain if '" 404 ' in line)
    seen = trace["steps"][0]["observation"]["preview"].splitlines()
    assert seen[0] == f"{len(plain)} {not_found}"  # the whole log, line for line, and its table
    assert seen[1] == str(
        [
            ("app.log.2.gz", 1, THIRD),
            ("app.log.1", THIRD + 1, 2 * THIRD),
            ("app.log", 2 * THIRD + 1, 3 * THIRD),
            ("web.log", 3 * THIRD + 1, len(plain)),
        ]
    )
    assert [(Path(s["name"]).name, s["why"]) for s in trace["input"]["skipped"]] == [
        ("core.dump", "a binary file")
    ]
    assert "core.dump (a binary file)" in err


def test_include_exclude_and_the_size_limit_choose_the_files(tmp_path: Path, tree: Path) -> None:
    only, _ = _ask(tmp_path, [str(tree)], "--include", "*.gz,old/*")
    assert [Path(p["name"]).name for p in only["input"]["parts"]] == ["app.log.2.gz", "web.log"]
    assert only["input"]["skipped"] == []  # the binary was never a candidate: not counted
    without, _ = _ask(tmp_path, [str(tree)], "--exclude", "app.log*")
    assert [Path(p["name"]).name for p in without["input"]["parts"]] == ["web.log"]
    small, err = _ask(tmp_path, [str(tree)], "--max-file-mb", "0.2")
    kept = [Path(p["name"]).name for p in small["input"]["parts"]]
    assert kept == ["app.log.2.gz"]  # 0.1 MB compressed; each plain third is 0.7 MB
    too_big = {Path(s["name"]).name: s["why"] for s in small["input"]["skipped"]}
    assert too_big == {
        "app.log.1": "larger than --max-file-mb 0.2",
        "app.log": "larger than --max-file-mb 0.2",
        "web.log": "larger than --max-file-mb 0.2",
        "core.dump": "a binary file",
    }


def test_files_from_a_list_or_stdin_reads_as_the_files_given(tmp_path: Path, tree: Path) -> None:
    names = [tree / "app.log", tree / "app.log.1", tree / "app.log.2.gz"]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{p}\n" for p in names) + "\n")
    given, _ = _ask(tmp_path, [str(p) for p in names])
    listed, _ = _ask(tmp_path, ["--files-from", str(listing)])
    piped, _ = _ask(tmp_path, ["--files-from", "-"], stdin=b"\0".join(str(p).encode() for p in names) + b"\0")
    for trace in (listed, piped):
        assert trace["input"]["parts"] == given["input"]["parts"]  # a rotated set, oldest first
        assert trace["steps"][0]["observation"] == given["steps"][0]["observation"]


def test_a_directory_or_list_with_nothing_to_read_is_one_line(tmp_path: Path, tree: Path) -> None:
    empty = run_cli(["ask", str(tree), "q?", "-m", "scripted/none.json", "--include", "*.csv"], cwd=tmp_path)
    assert empty.returncode == 3 and empty.stdout == ""
    assert empty.stderr.strip().splitlines()[-1] == (
        f"rlm: {tree}: a directory with no file to read (after .gitignore, --include, --exclude)"
    )
    (tmp_path / "blank.txt").write_text("\n\n")
    blank = run_cli(["ask", "--files-from", "blank.txt", "q?", "-m", "scripted/none.json"], cwd=tmp_path)
    assert (
        blank.returncode == 2
        and blank.stderr.strip() == "rlm: --files-from blank.txt: the list names no file"
    )
    missing = run_cli(["ask", "--files-from", "nope.txt", "q?", "-m", "scripted/none.json"], cwd=tmp_path)
    assert missing.returncode == 3 and "Traceback" not in missing.stderr
    assert missing.stderr.strip() == "rlm: --files-from nope.txt: No such file or directory"
