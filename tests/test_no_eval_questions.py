"""No code, comment or document of the package quotes a question of the evaluation sets.

A rule written around the questions it is measured on is right on them and wrong on the rest;
the sets measure the tool only while nothing in it has seen them. Any run of six words of a
question (letters and digits, case folded) found in a file under rlm/ fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import FIXTURES

EVAL = FIXTURES / "eval"
PACKAGE = Path(__file__).resolve().parent.parent / "rlm"
RUN = 6  # words in a row: long enough that only a quotation repeats them


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _questions() -> list[tuple[str, str]]:
    found = []
    for tasks in sorted(EVAL.glob("*.jsonl")):
        for line in tasks.read_text(encoding="utf-8").splitlines():
            if line.strip():
                task = json.loads(line)
                found.append((f"{tasks.name}:{task['id']}", task["question"]))
    return found


def _quoted_runs(questions: list[tuple[str, str]], files: list[Path]) -> list[str]:
    texts = {p: " " + " ".join(_words(p.read_text(encoding="utf-8", errors="replace"))) + " " for p in files}
    quoted = []
    for where, question in questions:
        words = _words(question)
        for i in range(len(words) - RUN + 1):
            run = " " + " ".join(words[i : i + RUN]) + " "
            quoted += [f"{p} quotes {where}: {run.strip()!r}" for p, t in texts.items() if run in t]
    return quoted


def test_no_file_of_the_package_quotes_an_evaluation_question() -> None:
    questions = _questions()
    assert len(questions) >= 80  # every set is read
    files = [
        p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".txt", ".json", ".toml"}
    ]
    assert len(files) > 50
    assert _quoted_runs(questions, files) == []


def test_a_comment_quoting_part_of_a_question_is_found(tmp_path: Path) -> None:
    question = "Which program wrote the most lines to this log between noon and one?"
    module = tmp_path / "rule.py"
    module.write_text('# seen on: "the most lines to this log between noon"\nSHAPE = "count"\n')
    assert len(_quoted_runs([("set:q1", question)], [module])) >= 1
    module.write_text("# a count of the lines a program wrote\n")
    assert _quoted_runs([("set:q1", question)], [module]) == []
