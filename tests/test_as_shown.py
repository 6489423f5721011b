"""A typed final's values written as the rows shown write them (rlm.run.typed.as_shown)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import FIXTURES, ask_typed_cli

from rlm.run.typed.as_shown import as_shown, shown_cells

ACCESS = FIXTURES / "access.log"

SHOWN = """path         | count
-------------+------
/a/b.php     | 3
/c/          | 2
/c           | 1
(3 rows)"""


def test_an_item_with_an_end_character_lost_is_written_as_shown() -> None:
    cells = shown_cells(SHOWN)
    assert cells == {"/a/b.php", "/c/", "/c", "3", "2", "1"}
    assert as_shown("a/b.php", cells) == "/a/b.php"
    assert as_shown("a/b.php , /c/", cells) == "/a/b.php , /c/"  # the separator as written
    # Two shown values fit `c`; a number, a value as shown and a word no row holds stay.
    assert as_shown("c", cells) is None
    assert as_shown("3", cells) is None and as_shown("/a/b.php", cells) is None
    assert as_shown("b.php", cells) is None
    assert shown_cells("Your reply could not be used") == set()


def test_the_cli_gives_the_synthesis_the_paths_as_the_rows_write_them(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the model's final drops each path's leading `/`;
    the draft the answer is written from has the paths as the log writes them."""
    paths = sorted(
        {m[1] for x in ACCESS.read_text().splitlines() if (m := re.search(r'"[A-Z]+ (\S+) [^"]*" 404 ', x))}
    )
    assert 1 < len(paths) <= 50 and all(p.startswith("/") for p in paths)
    sent = {"op": "top", "column": "path", "k": 50, "where": [{"column": "status", "cmp": "=", "value": 404}]}
    replies = [
        json.dumps(sent),
        json.dumps({"op": "final", "answer": ", ".join(p.lstrip("/") for p in paths)}),
        json.dumps({"answer": ", ".join(paths), "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(
        ACCESS, "Which paths got a 404? Give them comma-separated.", replies, cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == ", ".join(paths) + "\n", proc.stderr
    synthesis = "\n".join(str(m.get("content")) for m in stub.requests[2]["body"]["messages"])
    assert ", ".join(paths) in synthesis
