"""A big file's first model turn does not wait for its line index: the profile is read from the
file's two ends (rlm.input.glance), the line count estimated and said so; the worker, the table
and the trace wait for the index, made meanwhile; a file rewritten while it was indexed ends
the run (exit 3), one appended to is read as it was indexed."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import bigfiles
import pytest
from conftest import FIXTURES, run_cli, traces_in, write_script

from rlm.errors import InputError
from rlm.input.glance import glance
from rlm.text.textfile import MappedText

MB = 1 << 20


def _held_index(monkeypatch: pytest.MonkeyPatch, before_scan: Any = None) -> threading.Event:
    """Treat a small file as a big one, and hold its line index until the run first waits for
    it (the worker's start): were the first model turn to wait for the index, the run would hang
    and the scan's own wait fail. Returns the event set once the run asked for the index."""
    import rlm.input.source as source_mod
    from rlm.run.engine import Engine

    monkeypatch.setattr(source_mod, "DEFERRED_INDEX_BYTES", 0)
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)
    asked = threading.Event()
    real_scan, real_wait = source_mod._scan, Engine.index_wait

    def held_scan(path: str) -> Any:
        assert asked.wait(60), "nothing asked for the line index"
        if before_scan is not None:
            before_scan()
        return real_scan(path)

    def index_wait(self: Engine) -> None:
        asked.set()
        real_wait(self)

    monkeypatch.setattr(source_mod, "_scan", held_scan)
    monkeypatch.setattr(Engine, "index_wait", index_wait)
    return asked


def _count_404(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)


def test_the_first_turn_is_written_before_the_line_index(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first prompt gives the line count as an estimate and the last lines without numbers;
    the model's first cell (the real worker, locked down) then reads every line and counts over
    the table; the trace records the count the index made."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    lines, expected = len(log.read_bytes().splitlines()), _count_404(log)
    asked = _held_index(monkeypatch)
    calls = isolated / "calls.jsonl"
    code = 'print(len(context_lines)); print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
    model = write_script(
        isolated / "s.json",
        {
            "replies": [
                {"tool": "execute", "args": {"code": code}},
                {"tool": "final", "args": {"answer": str(expected)}},
                json.dumps({"answer": str(expected), "explanation": "Counted by SQL.", "citations": ["F1"]}),
            ],
            "log": str(calls),
        },
    )
    result = run_ask(load_settings({"model": model}), str(log), "How many 404 responses are in it?")
    assert asked.is_set() and result.answer == str(expected)
    first = json.loads(calls.read_text().splitlines()[0])["messages"][-1]["content"]
    assert "lines (an estimate: they are being counted)" in first
    assert "longest line" not in first
    [trace] = traces_in(isolated)
    assert trace["steps"][0]["observation"]["preview"] == f"{lines}\n{expected}\n"
    assert trace["input"]["lines"] == lines and "lines_estimated" not in trace["input"]
    assert trace["input"]["longest_line"] == max(len(x) + 1 for x in log.read_bytes().splitlines())
    assert trace["line_index"]["background"] is True
    assert trace["table_build"]["background"] is True


def test_a_file_rewritten_while_it_is_indexed_ends_the_run(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewritten between the first prompt and its index: no answer from a mix of two files,
    InputError (exit 3), the trace on disk saying so."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    original = (FIXTURES / "access.log").read_bytes()
    log.write_bytes(original)
    _held_index(monkeypatch, lambda: log.write_bytes(original.replace(b'" 404 ', b'" 200 ')))
    model = write_script(
        isolated / "s.json",
        [
            {"tool": "execute", "args": {"code": 'print(sql("SELECT count(*) FROM log")[0][0])'}},
            {"tool": "final", "args": {"answer": "1"}},
            "1 [F1]",
        ],
    )
    with pytest.raises(InputError, match="while it was being read"):
        run_ask(load_settings({"model": model}), str(log), "How many requests?")
    [trace] = traces_in(isolated)
    assert trace["status"] == "error" and "while it was being read" in trace["error"]


def test_a_log_appended_to_while_it_is_indexed_is_read_as_indexed(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines appended before the index was made: the run reads the bytes indexed from a private
    copy (the worker and the table agree), says so, and keeps nothing in memory."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    original = (FIXTURES / "access.log").read_bytes()
    log.write_bytes(original)
    appended = original.splitlines(keepends=True)[:7]

    def append() -> None:
        with log.open("ab") as out:
            out.writelines(appended)

    _held_index(monkeypatch, append)
    grown = len(original.splitlines()) + len(appended)
    model = write_script(
        isolated / "s.json",
        [
            {
                "tool": "execute",
                "args": {"code": 'print(len(context_lines)); print(sql("SELECT count(*) FROM log")[0][0])'},
            },
            {"tool": "final", "args": {"answer": str(grown)}},
            json.dumps({"answer": str(grown), "explanation": "Counted.", "citations": ["F1"]}),
        ],
    )
    result = run_ask(load_settings({"model": model}), str(log), "How many requests?")
    assert result.answer == str(grown)
    [trace] = traces_in(isolated)
    assert trace["steps"][0]["observation"]["preview"] == f"{grown}\n{grown}\n"
    assert trace["input"]["snapshot"] is True and trace["input"]["lines"] == grown
    # The sha256 is of the bytes read, the lines appended with them.
    read = original + b"".join(appended)
    assert (
        trace["input"]["sha256"] == hashlib.sha256(read).hexdigest() != hashlib.sha256(original).hexdigest()
    )
    assert any("was written to while it was read" in w for w in trace["warnings"])


def test_the_profile_before_its_index_says_what_it_does_not_know(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the index: the count is an estimate (in the prompt and the recorded profile), the
    last lines have no numbers; after it, the exact count, the last lines numbered."""
    import rlm.input.source as source_mod

    monkeypatch.setattr(source_mod, "DEFERRED_INDEX_BYTES", 0)
    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    every = log.read_text().splitlines()
    with source_mod.open_source(str(log), background_table=True) as source:
        before = source.profile
        assert before.index_job is not None and before.index_path is None
        block = before.prompt_block(max_chars=20_000)
        assert f"about {before.lines:,} lines (an estimate" in block
        assert f"      …: {every[-1][:40]}" in block
        assert before.to_dict(wait=False)["lines_estimated"] is True
        after = before.with_table()
        assert after.index_job is None and after.lines == len(every) and after.table is not None
        block = after.prompt_block(max_chars=20_000)
        assert f"{len(every):,} lines" in block and "estimate" not in block
        assert f"{len(every):>7}: {every[-1][:40]}" in block
        assert "lines_estimated" not in after.to_dict(wait=False)


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_glance_reads_the_ends_as_the_index_does(tmp_path: Path, bom: bytes) -> None:
    """Each line the glance reads is what the indexed file gives for it: CRLF endings, a line
    over the cut with a multi-byte character across it, invalid bytes, no final newline; the
    count it estimates is near the real one; a file whose ends meet gets no glance."""
    path = tmp_path / "t.log"
    body = [f"line {i} é\r\n".encode() for i in range(3000)]
    body[1] = ("x" * 99 + "é" * 60 + "\n").encode()  # the cut at 100 bytes falls inside an é
    body[-2] = b"bad \xff\xfe byte\n"
    body[-1] = b"no newline at the end"
    path.write_bytes(bom + b"".join(body))
    seen = glance(str(path), "utf-8", head_lines=6, tail_lines=4, max_bytes=100)
    assert seen is not None
    with MappedText(str(path)) as text:
        n = text.n_lines
        assert seen.head == [text.line_head(i, 100) for i in range(6)]
        assert seen.tail == [text.line_head(i, 100) for i in range(n - 4, n)]
    assert abs(seen.estimated_lines - n) <= n * 0.05
    assert not seen.binary
    small = tmp_path / "small.log"
    small.write_bytes(b"".join(body[:9]))
    assert glance(str(small), "utf-8", head_lines=6, tail_lines=4, max_bytes=100) is None


@pytest.mark.slow  # a 300 MB file, built and asked about cold
def test_a_big_file_through_the_cli_answers_from_its_index_made_as_it_ran(tmp_path: Path) -> None:
    """The user's path: `rlm ask` on a 300 MB access log, default settings, the real worker. The
    first prompt went out with the count estimated; the answer is counted over every line."""
    log = tmp_path / "access.log"
    bigfiles.apache_log(log, 300 * MB)
    lines = sum(1 for _ in log.open("rb"))
    calls = tmp_path / "calls.jsonl"
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {
                    "tool": "execute",
                    "args": {"code": 'print(len(context_lines), sql("SELECT count(*) FROM log")[0][0])'},
                },
                {"tool": "final", "args": {"answer": str(lines)}},
                json.dumps({"answer": str(lines), "explanation": "Counted.", "citations": ["F1"]}),
            ],
            "log": str(calls),
        },
    )
    proc = run_cli(["ask", str(log), "how many requests?", "-m", model], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(lines)
    first = json.loads(calls.read_text().splitlines()[0])["messages"][-1]["content"]
    assert "lines (an estimate: they are being counted)" in first
    [trace] = traces_in(tmp_path)
    assert trace["steps"][0]["observation"]["preview"] == f"{lines} {lines}\n"
    assert trace["input"]["lines"] == lines and trace["line_index"]["background"] is True
