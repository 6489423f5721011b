"""The live status line, seen as a person at a terminal sees it: stderr on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES, cli_env, write_script

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _run_on_a_terminal(
    tmp_path: Path, extra_env: dict[str, str], *flags: str
) -> tuple[str, str, float | None]:
    """(stdout, what the terminal showed on stderr, seconds until a status appeared)."""
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "grep", "args": {"pattern": "HEAD"}, "delay": 1.5},
            {"tool": "final", "args": {"answer": "7"}},
            "7",
        ],
    )
    master, slave = pty.openpty()
    env = cli_env(tmp_path, {"TERM": "xterm-256color", "COLUMNS": "120", **extra_env})
    env.pop("NO_COLOR", None) if "NO_COLOR" not in extra_env else None
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm", "ask", str(FIXTURES / "access.log"), "q", "-m", model, *flags],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    shown = b""
    first_status: float | None = None
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
            plain = ANSI.sub("", shown.decode(errors="replace"))
            if first_status is None and re.search(
                r"\w[^\n]* · \d+ s · [\d,]+ tokens",
                plain,  # any status: what, for how long, tokens
            ):
                first_status = time.monotonic() - started
        elif proc.poll() is not None:
            break
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    proc.wait(timeout=30)
    assert proc.returncode == 0
    return out, shown.decode(errors="replace"), first_status


def test_a_status_line_shows_while_the_first_call_is_out_and_says_what_is_happening(tmp_path: Path) -> None:
    out, shown, first = _run_on_a_terminal(tmp_path, {})
    assert out == "7\n"  # stdout is untouched by the status line
    assert first is not None
    plain = ANSI.sub("", shown)
    # It shows while the first model call is still out (1.5 s), before that step's line: the
    # order, not a wall-clock bound, since a busy machine's interpreter start alone can take 1 s.
    status = re.search(r"\w[^\n]* · \d+ s · [\d,]+ tokens", plain)
    assert status is not None and status.start() < plain.index("n0.1 grep /HEAD/"), plain
    assert "waiting for the model (n0, step 1) · 1 s" in plain  # the seconds count while it waits
    assert "writing the answer" in plain and "step n0.1" in plain and "tokens" in plain
    assert "n0.1 grep /HEAD/" in plain and "rlm: final" in plain  # the usual lines scroll above it


def test_no_color_and_a_dumb_terminal_are_respected(tmp_path: Path) -> None:
    _, shown, _ = _run_on_a_terminal(tmp_path, {"NO_COLOR": "1"})
    assert not re.search(r"\x1b\[(?:\d+;)*3\dm", shown)  # no foreground colours
    dumb = tmp_path / "dumb"
    dumb.mkdir()
    _, shown, first = _run_on_a_terminal(dumb, {"TERM": "dumb"})
    assert first is None and "\x1b[" not in shown  # plain lines only, one per step
    assert "n0.1 grep /HEAD/" in shown


def test_quiet_shows_nothing(tmp_path: Path) -> None:
    out, shown, first = _run_on_a_terminal(tmp_path, {}, "-q")
    assert out == "7\n" and first is None and shown.strip() == ""


def test_a_table_built_while_the_model_works_is_a_part_of_the_line_not_its_whole() -> None:
    """Before the model's first turn the build is the line's text; once the run has moved on
    (a table built in the background), the line says what the run does and, beside it, the
    table's share built, as long as its progress keeps coming."""
    import io

    from rich.console import Console

    from rlm.cli.render import LiveStatus
    from rlm.run.events import Phase, TableBuild

    status = LiveStatus(Console(file=io.StringIO(), force_terminal=False))
    status.update(Phase("reading the input"))
    status.update(TableBuild.of(0.2, 1_000_000_000, 2.0))
    assert status._text().startswith("building the table: 20% of 1,000 MB")
    status.update(Phase("waiting for the model (n0, step 1)"))
    status.update(TableBuild.of(0.45, 1_000_000_000, 4.5))
    text = status._text()
    assert text.startswith("waiting for the model (n0, step 1) · 0 s · table 45% built"), text
    assert status.table is not None
    status.table = (status.table[0], time.monotonic() - 5)  # no progress since: the build ended
    assert "table" not in status._text()
    status.stop()
