"""Nothing rlm reads reaches a terminal raw: escape sequences in the file or in a model's reply
(clear screen, window title, OSC 52 clipboard, OSC 8 links, C1 CSI, overprinting, bidi
overrides) are shown as visible escapes in the answer on a terminal, progress, --explain,
`rlm replay`, `rlm logs` and `rlm memory`; rich reads none of it as markup. Into a pipe the
answer keeps its exact bytes.

One scripted run on a pseudo-terminal and one into pipes, over a log whose lines hold every
class, feed every check."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import cli_env, run_cli, write_script

# Each class of hostile text, as a line of the log starts with it: (raw, how it must be shown).
CLASSES = {
    "title": ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
    "clear": ("\x1b[2J", "\\x1b[2J"),
    "clipboard": ("\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"),
    "link": (
        "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
        "\\x1b]8;;http://evil.example/\\x1b\\click\\x1b]8;;\\x1b\\",
    ),
    "c1": ("\x9b2J", "\\x9b2J"),
    "overprint": ("AAAA\rBBBB", "AAAA\\x0dBBBB"),
    "backspace": ("abc\x08\x08\x08xyz", "abc\\x08\\x08\\x08xyz"),
    "bidi": ("\u202eevil\u202c \u2066iso\u2069", "\\u202eevil\\u202c \\u2066iso\\u2069"),
}
MARKUP = "[bold red]LOUD[/bold red] [link=http://evil.example/]x[/link]"
# The answer the model gives, every class in it (markup and escapes first, where `rlm logs`
# shows its first 60 characters).
ANSWER = "[bold red]LOUD[/bold red] " + " ".join(raw for raw, _ in CLASSES.values()) + " [link=x]y[/link]"
SHOWN = "[bold red]LOUD[/bold red] " + " ".join(shown for _, shown in CLASSES.values()) + " [link=x]y[/link]"
QUESTION = "[bold red]What[/bold red] \x1b]0;q\x07do the EVIL lines say?"

# What must never be written to a terminal: C0 controls but \n and \t, DEL, C1, bidi
# controls, line/paragraph separators, lone surrogates.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
# rich's own drawing on a terminal: colours, the status line's cursor moves. Removed before
# the output of a run on a terminal is checked; none of the hostile classes has this shape
# (the clear-screen CSI is looked for first, on its own).
RICH = re.compile(r"\x1b\[(?:\?25[lh]|[0-9;]*[mAKGl])|\r")


def _raw_in(text: str) -> list[str]:
    return sorted({repr(c) for c in RAW.findall(text)})


def _hostile_log(path: Path) -> None:
    lines = ["2024-01-01 12:00:00 INFO a normal line"]
    for name, (raw, _) in CLASSES.items():
        lines.append(f"{raw} EVIL {name} 2024-01-01 12:00:01")
    lines.append(f"EVIL markup {MARKUP}")
    path.write_text("\n".join(lines * 3) + "\n", encoding="utf-8")


def _script(path: Path) -> str:
    return write_script(
        path,
        [
            {"tool": "grep", "args": {"pattern": "EVIL"}},
            {"tool": "execute", "args": {"code": "for l in context_lines:\n    if 'EVIL' in l: print(l)"}},
            {"tool": "final", "args": {"answer": ANSWER}},
            json.dumps({"answer": ANSWER, "explanation": "Because: " + ANSWER, "citations": ["F2"]}),
        ],
    )


def _read_all(fds: list[int], proc: subprocess.Popen[bytes], timeout: float) -> dict[int, bytes]:
    """Everything written to the masters of two pseudo-terminals until the process ends."""
    got = {fd: b"" for fd in fds}
    open_fds = list(fds)
    deadline = time.monotonic() + timeout
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(open_fds, [], [], 0.2)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the slave side is closed
                chunk = b""
            if chunk:
                got[fd] += chunk
            else:
                open_fds.remove(fd)
    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    return got


@dataclass
class Runs:
    cwd: Path
    log: Path
    tty_code: int
    tty_out: str  # stdout as the terminal showed it (CRLF made LF)
    tty_err: str
    pipe: subprocess.CompletedProcess[bytes]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    cwd = tmp_path_factory.mktemp("terminal")
    log = cwd / "hostile.log"
    _hostile_log(log)
    model = _script(cwd / "s.json")
    args = [sys.executable, "-m", "rlm", "ask", str(log), QUESTION, "-m", model, "--explain"]
    # A person at a terminal: stdout and stderr each on a pseudo-terminal (the live status on).
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    env = cli_env(cwd, {"TERM": "xterm-256color", "COLUMNS": "200"})
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out_slave, stderr=err_slave
    )
    os.close(out_slave)
    os.close(err_slave)
    try:
        got = _read_all([out_master, err_master], proc, 120)
    finally:
        os.close(out_master)
        os.close(err_master)
    # A script: the same question into pipes.
    piped = subprocess.run(args, cwd=cwd, env=cli_env(cwd), capture_output=True, timeout=120)
    return Runs(
        cwd,
        log,
        proc.returncode,
        got[out_master].decode("utf-8", "replace").replace("\r\n", "\n"),
        got[err_master].decode("utf-8", "replace").replace("\r\n", "\n"),
        piped,
    )


def test_visible_shows_every_class_as_an_escape() -> None:
    from rlm.text.visible import visible

    for name, (raw, shown) in CLASSES.items():
        assert shown in visible(f"x {raw} y"), name
        assert not _raw_in(visible(raw)), name
    assert visible("\x00\x7f\x85\u061c\u200e\u200f\u2028\u2029\udc9b") == (
        "\\x00\\x7f\\x85\\u061c\\u200e\\u200f\\u2028\\u2029\\udc9b"
    )
    # Kept as they are: newlines, tabs, a CRLF line end, printable text in any script.
    kept = "a\tb\nc\r\nd é 日本 עברית 😀 [bold]x[/bold] C:\\path"
    assert visible(kept) == kept
    assert visible(ANSWER) == SHOWN
    assert visible(SHOWN) == SHOWN  # made visible once is enough


def test_the_answer_is_made_visible_on_a_terminal_and_exact_into_a_pipe(runs: Runs) -> None:
    assert runs.tty_code == 0, runs.tty_err
    assert not _raw_in(runs.tty_out), runs.tty_out
    assert runs.tty_out == SHOWN + "\n"
    # A script reading stdout gets the bytes the answer holds.
    assert runs.pipe.returncode == 0, runs.pipe.stderr
    assert runs.pipe.stdout == (ANSWER + "\n").encode()


def test_progress_and_explain_on_stderr_are_made_visible(runs: Runs) -> None:
    # Into a pipe: nothing raw at all.
    err = runs.pipe.stderr.decode()
    assert not _raw_in(err), err
    assert "Because: " + SHOWN in err  # --explain
    assert "[F2]" in err and CLASSES["title"][1] in err  # the cited finding, file text in it
    # On a terminal: rich's colours and status line only, never the file's sequences.
    shown = runs.tty_err
    assert "\x1b[2J" not in shown
    assert not _raw_in(RICH.sub("", shown)), shown
    assert "Because: " + SHOWN in RICH.sub("", shown)


def test_replay_shows_the_trace_text_made_visible(runs: Runs) -> None:
    trace = sorted((runs.cwd / "traces").glob("*.json"))[-1]
    assert ANSWER in json.loads(trace.read_text())["answer"]  # the trace keeps the exact value
    proc = run_cli(["replay", "last"], cwd=runs.cwd)
    assert proc.returncode == 0, proc.stderr
    assert not _raw_in(proc.stdout), proc.stdout
    for name, (_, shown) in CLASSES.items():
        assert shown in proc.stdout, name
    assert f"Answer: {SHOWN}" in proc.stdout


def test_logs_show_text_made_visible_and_never_as_markup(runs: Runs) -> None:
    proc = run_cli(["logs"], cwd=runs.cwd, env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert not _raw_in(proc.stdout), proc.stdout
    assert "[bold red]What[/bold red] \\x1b]0;q\\x07do" in proc.stdout  # as typed, not styled
    assert "[bold red]LOUD[/bold red] \\x1b]0;pwned\\x07" in proc.stdout


def test_memory_list_and_show_make_the_remembered_text_visible(runs: Runs) -> None:
    listed = run_cli(["memory", "list", str(runs.log)], cwd=runs.cwd)
    assert listed.returncode == 0, listed.stderr
    assert "M1" in listed.stdout and not _raw_in(listed.stdout), listed.stdout
    assert CLASSES["title"][1] in listed.stdout
    shown = run_cli(["memory", "show", "M1"], cwd=runs.cwd)
    assert shown.returncode == 0, shown.stderr
    assert not _raw_in(shown.stdout), shown.stdout
    for name, (_, visible_form) in CLASSES.items():
        assert visible_form in shown.stdout, name


def test_json_events_on_a_terminal_escape_c1_and_bidi_and_keep_the_value() -> None:
    """JSON escapes C0 controls but writes C1 (a CSI) and bidi overrides as they are: on a
    terminal `--jsonl` writes them as \\uXXXX, the same JSON value; into a pipe, unchanged."""
    import io

    from rlm.cli.events import JsonlEvents

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, raw_expected in ((Terminal(), False), (io.StringIO(), True)):
        JsonlEvents(stream).emit("answer", answer=ANSWER)
        line = stream.getvalue()
        assert bool(_raw_in(line)) is raw_expected, line
        assert json.loads(line)["answer"] == ANSWER
