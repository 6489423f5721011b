"""`rlm feedback RUN worked|failed|partial` and `rlm memory list|show|forget|stats`.

Feedback moves the scores of the memories a run cited (and of those only
offered to it) by the rules of rlm.memory.rules; `memory` shows and prunes
what is kept; `prune` applies its bounds now; `reset` (or `forget --all` over a damaged
database) sets the database aside and starts afresh. Exit codes: 0 done, 2 usage error, 3
unknown run, memory id or file, or a memory database that cannot be used (one line, naming
it and, when it is damaged, `rlm memory reset`).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, cast

import typer

from rlm.cli.jsonout import print_json
from rlm.cli.plainhelp import PlainHelp
from rlm.cli.settings_flags import with_settings_flags
from rlm.errors import ExitCode
from rlm.memory.rules import Outcome
from rlm.text.visible import visible

memory_app = typer.Typer(
    help="What rlm remembers about files across runs: list, show, forget, stats, prune, reset.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

MemoryOption = Annotated[
    str | None,
    typer.Option("--memory", help="The memory database (env RLM_MEMORY; default: the per-user one)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


def _fail(message: str, code: ExitCode) -> NoReturn:
    print(f"rlm: {visible(message)}", file=sys.stderr, flush=True)
    raise typer.Exit(int(code))


@contextmanager
def _open(path: str | None) -> Iterator[Any]:
    """The open store; a database that cannot be used, on opening or later, ends the command in
    one line that names the file and, when it is damaged, the way out (never a traceback)."""
    from rlm.memory.store import MemoryStore, default_memory_path

    where = path or default_memory_path()
    try:
        store = MemoryStore(where)
    except (sqlite3.Error, OSError) as exc:
        _unusable(where, exc)
    try:
        yield store
    except sqlite3.Error as exc:
        _unusable(where, exc)
    finally:
        store.close()


def _unusable(where: str, exc: BaseException) -> NoReturn:
    from rlm.memory.store import unusable

    if isinstance(exc, OSError):
        _fail(f"the memory database {where} cannot be used ({exc.strerror or exc})", ExitCode.INPUT)
    problem = unusable(where, exc)
    if problem.damaged:
        _fail(
            f"the memory database {where} is damaged ({problem.reason}); `rlm memory reset` sets it aside "
            "and starts afresh",
            ExitCode.INPUT,
        )
    _fail(f"the memory database {where} cannot be used ({problem.reason})", ExitCode.INPUT)


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
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return list(store.inputs_matching(str(path), os.path.getsize(path), digest))


def _row(m: Any, now: float) -> dict[str, Any]:
    """One memory's fields as list and show give them: its standing (the confidence and grounding
    its run gave the answer, feedback, citations), age, question and text."""
    from rlm.memory.recall import age_text, standing_text

    return {
        "id": m.ref,
        "tier": m.tier,
        "answer_confidence": m.answer_confidence,
        "answer_grounded": m.answer_grounded,
        "holds_answer": m.holds_answer,
        "score": round(m.score, 3),
        "successes": m.successes,
        "failures": m.failures,
        "feedback_confidence": round(m.feedback_confidence, 3),
        "offered": m.offered,
        "cited": m.cited,
        "standing": standing_text(m),
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
        print_json({"memories": rows})
        return
    if not rows:
        print("(no memories)")
        return
    for r in rows:
        text = " ".join(r["text"].split())
        question = " ".join(r["question"].split())
        print(
            f"{r['id']:>5}  {r['tier']:<8} {r['age']} ago  {r['standing']}  offered {r['offered']}\n"
            f"       for {visible(repr(question[:90]))}: {visible(text[:90])}"
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
        print_json(row)
        return
    unknown = {
        "answer_confidence": "not recorded",
        "answer_grounded": "not checked",
        "holds_answer": "not checked",
    }
    for key in (
        "id",
        "tier",
        "standing",
        "answer_confidence",
        "answer_grounded",
        "holds_answer",
        "score",
        "successes",
        "failures",
        "feedback_confidence",
        "offered",
        "cited",
        "age",
        "question",
        "evidence",
        "input_sha256",
    ):
        value = unknown[key] if row[key] is None and key in unknown else row[key]
        print(f"{key}: {visible(str(value))}")  # a memory's text came from a file or a model
    print(f"text: {visible(row['text'])}")


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
    if everything and _set_aside_if_damaged(memory):
        return
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


def _set_aside_if_damaged(path: str | None) -> bool:
    """`forget --all` over a damaged database: it is set aside (renamed, not deleted) and the
    memory starts empty. False when the database is not damaged (or not there)."""
    from rlm.memory.store import MemoryStore, MemoryUnusable, default_memory_path

    where = path or default_memory_path()
    if not os.path.lexists(where):
        return False
    try:
        MemoryStore(where).close()
        return False
    except MemoryUnusable as exc:
        if not exc.damaged:
            return False
        reason = exc.reason
    except (sqlite3.Error, OSError):
        return False
    moved = _move_aside(where, "damaged")
    print(f"the memory database {where} was damaged ({reason}): set aside as {moved}; forgot everything")
    return True


def _move_aside(where: str, why: str) -> str:
    from rlm.memory.store import set_aside

    try:
        moved = set_aside(where, why)
    except (sqlite3.Error, OSError) as exc:
        _unusable(where, exc)
    return str(moved)


@memory_app.command("reset", cls=PlainHelp)
def reset_command(memory: MemoryOption = None) -> None:
    """Start an empty memory: the database (damaged or not) is set aside as NAME.damaged-TIME or
    NAME.reset-TIME, never deleted."""
    from rlm.memory.store import MemoryStore, MemoryUnusable, default_memory_path

    where = memory or default_memory_path()
    if not os.path.lexists(where):
        print(f"no memory database at {where}: nothing to reset")
        return
    why = "reset"
    try:
        MemoryStore(where).close()
    except MemoryUnusable as exc:
        why = "damaged" if exc.damaged else why
    except (sqlite3.Error, OSError):
        pass
    moved = _move_aside(where, why)
    print(f"set the memory database {where} aside as {moved}; the next run starts an empty one")


@memory_app.command("prune", cls=PlainHelp)
def prune_command(memory: MemoryOption = None) -> None:
    """Apply the bounds now (docs/memory.md): memories unused for 30 days (patterns excepted) or past
    10,000, run records past 90 days, sub-call answers unused for 30 days or past 64 MB, and
    traces in rlm's own trace folder past the newest 1,000 or 500 MB. Runs do this once a day."""
    from rlm.memory import rules
    from rlm.run.settings import default_trace_dir
    from rlm.trace.retention import sweep

    with _open(memory) as store:
        pruned = store.prune()
        store.compact()
        where = store.path
    for ids, why in (
        (pruned.unused, f"unused for {rules.MEMORY_UNUSED_DAYS} days"),
        (pruned.over_cap, f"past the {rules.MAX_MEMORIES:,} kept"),
    ):
        if ids:
            print(f"removed {_count(len(ids), 'memory', 'memories')} {why}: {' '.join(f'M{i}' for i in ids)}")
    print(
        f"memory {where}: removed {_count(len(pruned.unused) + len(pruned.over_cap), 'memory', 'memories')}, "
        f"{_count(pruned.runs, 'run record', 'run records')}, "
        f"{_count(pruned.subcalls, 'sub-call cache entry', 'sub-call cache entries')}"
    )
    traces = default_trace_dir()
    swept = sweep(traces)
    print(
        f"traces {traces}: removed {_count(len(swept.removed), 'trace', 'traces')} "
        f"({swept.freed_bytes / 1e6:.1f} MB)"
    )


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


@memory_app.command("stats", cls=PlainHelp)
def stats_command(memory: MemoryOption = None, as_json: JsonOption = False) -> None:
    """Offered vs cited per memory: ones offered often and never cited are worth a review."""
    with _open(memory) as store:
        rows = store.stats()
    if as_json:
        print_json({"memories": rows})
        return
    offered = sum(int(r["offered"]) for r in rows)
    cited = sum(int(r["cited"]) for r in rows)
    print(f"{len(rows)} memories; offered {offered} times, cited {cited} times")
    for r in rows:
        text = " ".join(str(r["text"]).split())
        print(
            f"M{r['id']:<4} {r['tier']:<8} offered {r['offered']:>3}  cited {r['cited']:>3}  score {r['score']:.2f}  {visible(text[:80])}"
        )


@with_settings_flags("trace_dir", help={"trace_dir": "Where `last` is looked for"})
def feedback_command(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run id (a trace's name), or last.")],
    outcome: Annotated[str, typer.Argument(metavar="OUTCOME", help="worked, failed or partial.")],
    memory: MemoryOption = None,
    *,
    flags: dict[str, Any],
) -> None:
    """Say how a run's answer turned out: the memories it cited gain or lose standing."""
    trace_dir = flags["trace_dir"]
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
            print(visible(f"run {run_id} already had feedback ({record['feedback']}): nothing changed"))
            return
        changes = store.feedback(run_id, cast(Outcome, outcome))
    if not changes:
        print(visible(f"run {run_id}: no memories to adjust"))
        return
    for c in changes:
        print(
            f"M{c.memory}: {'cited' if c.cited else 'offered, not cited'}; score {c.before.score:.2f} -> "
            f"{c.after.score:.2f}, {c.before.tier} -> {c.after.tier}"
        )
