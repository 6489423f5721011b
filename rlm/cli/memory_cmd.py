"""`rlm feedback RUN worked|failed|partial` and `rlm memory list|show|forget|stats`.

Feedback moves the scores of the memories a run cited (and of those only
offered to it) by the rules of rlm.memory.rules; `memory` shows and prunes
what is kept. Exit codes: 0 done, 2 usage error, 3 unknown run, memory id or
file, or a memory database that cannot be read.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from rlm.cli.plainhelp import PlainHelp
from rlm.errors import ExitCode
from rlm.memory.rules import Outcome

memory_app = typer.Typer(
    help="What rlm remembers about files across runs: list, show, forget, stats.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

MemoryOption = Annotated[
    str | None,
    typer.Option("--memory", help="The memory database (env RLM_MEMORY; default: the per-user one)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


def _fail(message: str, code: ExitCode) -> None:
    print(f"rlm: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(int(code))


def _open(path: str | None) -> Any:
    import sqlite3

    from rlm.memory.store import MemoryStore, default_memory_path

    where = path or default_memory_path()
    try:
        return MemoryStore(where)
    except (sqlite3.Error, OSError) as exc:
        _fail(f"cannot open the memory {where}: {exc}", ExitCode.INPUT)


def _memory_id(ref: str) -> int:
    digits = ref[1:] if ref[:1] in ("M", "m") else ref
    if not digits.isdigit():
        _fail(f"{ref!r} is not a memory id (M12, or 12)", ExitCode.USAGE)
    return int(digits)


def _inputs_of(store: Any, file: str) -> list[str]:
    import hashlib

    path = Path(file)
    if not path.is_file():
        _fail(f"file not found: {file}", ExitCode.INPUT)
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 * 1024 * 1024):
            h.update(chunk)
    return list(store.inputs_matching(str(path), os.path.getsize(path), h.hexdigest()))


def _row(m: Any, now: float) -> dict[str, Any]:
    from rlm.memory.recall import age_text

    return {
        "id": m.ref,
        "tier": m.tier,
        "score": round(m.score, 3),
        "confidence": round(m.confidence, 3),
        "offered": m.offered,
        "cited": m.cited,
        "age": age_text(now - m.created),
        "question": m.question,
        "text": m.text,
        "evidence": m.evidence,
        "input_sha256": m.input_sha,
    }


@memory_app.command("list", cls=PlainHelp)
def list_command(
    file: Annotated[
        str | None, typer.Argument(metavar="FILE", help="Only what applies to this file.")
    ] = None,
    memory: MemoryOption = None,
    as_json: JsonOption = False,
) -> None:
    """The memories kept, newest last (for FILE: those a run over it would be offered from)."""
    with _open(memory) as store:
        keys = _inputs_of(store, file) if file else None
        found = store.memories() if keys is None else [m for k in keys for m in store.memories(k)]
        now = time.time()
        rows = [_row(m, now) for m in found]
    if as_json:
        print(json.dumps({"memories": rows}, ensure_ascii=False))
        return
    if not rows:
        print("(no memories)")
        return
    for r in rows:
        text = " ".join(r["text"].split())
        print(
            f"{r['id']:>5}  {r['tier']:<8} score {r['score']:.2f}  cited {r['cited']}/{r['offered']} offered"
            f"  {r['age']} ago  {text[:90]}"
        )


@memory_app.command("show", cls=PlainHelp)
def show_command(
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="A memory id: M12 or 12.")],
    memory: MemoryOption = None,
    as_json: JsonOption = False,
) -> None:
    """One memory in full: its text, evidence, question, standing."""
    with _open(memory) as store:
        found = store.get(_memory_id(memory_id))
        if found is None:
            _fail(f"no memory {memory_id}", ExitCode.INPUT)
        row = _row(found, time.time())
    if as_json:
        print(json.dumps(row, ensure_ascii=False))
        return
    for key in (
        "id",
        "tier",
        "score",
        "confidence",
        "offered",
        "cited",
        "age",
        "question",
        "evidence",
        "input_sha256",
    ):
        print(f"{key}: {row[key]}")
    print(f"text: {row['text']}")


@memory_app.command("forget", cls=PlainHelp)
def forget_command(
    memory_id: Annotated[str | None, typer.Argument(metavar="ID", help="A memory id: M12 or 12.")] = None,
    file: Annotated[str | None, typer.Option("--file", help="Every memory about this file.")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every memory, and the sub-call cache.")] = False,
    memory: MemoryOption = None,
) -> None:
    """Delete one memory, those about a file, or all."""
    if [memory_id is not None, file is not None, everything].count(True) != 1:
        _fail("give exactly one of ID, --file FILE or --all", ExitCode.USAGE)
    with _open(memory) as store:
        if everything:
            n = store.forget(everything=True)
        elif file is not None:
            n = sum(store.forget(input_sha=k) for k in _inputs_of(store, file))
        else:
            assert memory_id is not None
            n = store.forget(memory_id=_memory_id(memory_id))
            if n == 0:
                _fail(f"no memory {memory_id}", ExitCode.INPUT)
    print(f"forgot {n} memor{'y' if n == 1 else 'ies'}")


@memory_app.command("stats", cls=PlainHelp)
def stats_command(memory: MemoryOption = None, as_json: JsonOption = False) -> None:
    """Offered vs cited per memory: ones offered often and never cited are worth a review."""
    with _open(memory) as store:
        rows = store.stats()
    if as_json:
        print(json.dumps({"memories": rows}, ensure_ascii=False))
        return
    offered = sum(int(r["offered"]) for r in rows)
    cited = sum(int(r["cited"]) for r in rows)
    print(f"{len(rows)} memories; offered {offered} times, cited {cited} times")
    for r in rows:
        text = " ".join(str(r["text"]).split())
        print(
            f"M{r['id']:<4} {r['tier']:<8} offered {r['offered']:>3}  cited {r['cited']:>3}  score {r['score']:.2f}  {text[:80]}"
        )


def feedback_command(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run id (a trace's name), or last.")],
    outcome: Annotated[str, typer.Argument(metavar="OUTCOME", help="worked, failed or partial.")],
    memory: MemoryOption = None,
    trace_dir: Annotated[str | None, typer.Option("--trace-dir", help="Where `last` is looked for.")] = None,
) -> None:
    """Say how a run's answer turned out: the memories it cited gain or lose standing."""
    if outcome not in ("worked", "failed", "partial"):
        _fail(f"OUTCOME must be worked, failed or partial, not {outcome!r}", ExitCode.USAGE)
    run_id = run
    if run == "last":
        from rlm.replay.logs import latest_trace
        from rlm.run.settings import load_settings, trace_dirs_to_read

        newest = latest_trace(trace_dirs_to_read(load_settings({"trace_dir": trace_dir})))
        if newest is None:
            _fail("no runs to give feedback on", ExitCode.INPUT)
        assert newest is not None
        run_id = newest.stem
    run_id = Path(run_id).stem if run_id.endswith(".json") else run_id
    with _open(memory) as store:
        record = store.run(run_id)
        if record is None:
            _fail(
                f"run {run_id} is not in the memory (it ran with --no-memory, or elsewhere)", ExitCode.INPUT
            )
        assert record is not None
        if record["feedback"] is not None:
            print(f"run {run_id} already had feedback ({record['feedback']}): nothing changed")
            return
        changes = store.feedback(run_id, cast(Outcome, outcome))
    if not changes:
        print(f"run {run_id}: no memories to adjust")
        return
    for c in changes:
        print(
            f"M{c.memory}: {'cited' if c.cited else 'offered, not cited'}; score {c.before.score:.2f} -> "
            f"{c.after.score:.2f}, {c.before.tier} -> {c.after.tier}"
        )
