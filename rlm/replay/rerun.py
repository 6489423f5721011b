"""`rlm replay TRACE --rerun`: drive the whole loop again from the recorded model calls.

A trace holds a cassette (rlm.run.cassette): every model call of the run, keyed by its
request, with the reply the client returned. The real engine runs again with model
clients that serve each request from it by key, whatever order the calls come in; a
request whose prompt changed (the code did) is served the next recording of its role in
order, and said. No network; a new trace is written. What changed between the two runs is
reported step by step, with how the calls were served: the point is to learn whether this
version of the tool still reaches the same answer.

A trace written before the cassette is re-run the old way, from scripts rebuilt from its
steps (rlm.replay.rerun_scripts), and the report says what that cannot replay.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rlm.replay.paint import painter
from rlm.replay.render import describe_action
from rlm.replay.replay_settings import RERUN_FROM_TRACE, RERUN_USES, replay_settings
from rlm.replay.rerun_scripts import original_protocol, write_scripts
from rlm.replay.verify import resolve_input
from rlm.run.settings import Settings, load_settings
from rlm.text.visible import visible

NO_CASSETTE = (
    "this trace holds no recorded model calls (an earlier rlm wrote it): it is re-run from "
    "its steps' replies in the order they show, which cannot replay a second, widened "
    "synthesis pass"
)


@dataclass
class StepDiff:
    node: str
    index: int
    status: str  # same | different | missing | extra
    recorded: str = ""
    now: str = ""
    what: list[str] = field(default_factory=list)


@dataclass
class RerunResult:
    trace: str
    new_trace: str | None
    recorded_answer: str | None
    answer: str | None
    recorded_status: str | None
    status: str
    exit_code: int
    steps: list[StepDiff] = field(default_factory=list)
    # The recorded settings not used: {name: (recorded, used)}.
    ignored: dict[str, tuple[str, str]] = field(default_factory=dict)
    # How the cassette served the calls (rlm.run.cassette.Playback.to_dict); None without one.
    model_calls: dict[str, Any] | None = None
    note: str | None = None

    @property
    def answer_same(self) -> bool:
        return self.recorded_answer == self.answer

    @property
    def ok(self) -> bool:
        calls = self.model_calls or {}
        return (
            self.answer_same
            and self.recorded_status == self.status
            and all(s.status == "same" for s in self.steps)
            and not calls.get("unanswered")
            and not calls.get("unplayed")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "new_trace": self.new_trace,
            "ok": self.ok,
            "answer_same": self.answer_same,
            "recorded_answer": self.recorded_answer,
            "answer": self.answer,
            "recorded_status": self.recorded_status,
            "status": self.status,
            "exit_code": self.exit_code,
            "recorded_settings_not_used": {k: was for k, (was, _) in self.ignored.items()},
            "steps": [asdict(s) for s in self.steps],
            "model_calls": self.model_calls,
            "note": self.note,
        }


def _label(step: dict[str, Any]) -> str:
    return (
        f"unusable reply: {step.get('parse_error')}"
        if step.get("parse_error")
        else describe_action(step.get("action"))
    )


def compare_steps(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[StepDiff]:
    before = {(s["node"], s["index"]): s for s in old}
    after = {(s["node"], s["index"]): s for s in new}
    keys = list(before) + [k for k in after if k not in before]
    out = []
    for key in keys:
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            present = a or b
            assert present is not None
            out.append(StepDiff(key[0], key[1], "missing" if b is None else "extra", _label(present)))
            continue
        what = []
        if (a.get("action"), a.get("parse_error")) != (b.get("action"), b.get("parse_error")):
            what.append("action")
        if (a.get("observation") or {}).get("preview") != (b.get("observation") or {}).get("preview"):
            what.append("output")
        out.append(StepDiff(key[0], key[1], "different" if what else "same", _label(a), _label(b), what))
    return out


def _settings(
    doc: dict[str, Any], user: Settings, models: dict[str, Any]
) -> tuple[Settings, dict[str, tuple[str, str]]]:
    """The user's settings, the loop-shaping ones the trace recorded, and the replay's own."""
    fixed = dict(
        **models,
        api_base=None,
        api_key=None,
        gguf=None,
        # One sub-call at a time: a request whose prompt changed is served in recorded order.
        concurrency=1,
        # A fan-out's calls, batched or not, are served from the cassette: no job is sent.
        batch=False,
        retries=0,
        trace=True,
        # A re-run replays what was recorded: it neither reads the memory (which has moved on
        # since) nor adds to it, and asks no cache.
        memory=None,
        no_memory=True,
    )
    return replay_settings(doc, user, from_trace=RERUN_FROM_TRACE, uses=RERUN_USES, fixed=fixed)


def _say(message: str) -> None:
    print(f"rlm: {visible(message)}", file=sys.stderr, flush=True)


def rerun_trace(
    doc: dict[str, Any],
    *,
    input_override: str | None,
    trace_path: str | os.PathLike[str],
    settings: Settings | None = None,
    say: Callable[[str], None] = _say,
) -> RerunResult:
    """Drive the loop again under the user's `settings` (default: as flags, environment and
    config resolve them; its trace_dir is where the new trace goes). `say` gets the one
    line about a trace that can only be re-run the old way."""
    from rlm.replay.render import load_trace
    from rlm.run.cassette import Cassette
    from rlm.run.wiring import run_ask

    path = resolve_input(doc, input_override, trace_path)
    user = settings or load_settings()
    question = str(doc.get("question") or "")
    cassette = Cassette.of(doc, str(trace_path))
    note = None
    if cassette is not None:
        # The recorded protocol setting stands: with `auto`, each client says what it did.
        names = {
            "model": cassette.model_name("root"),
            "sub_model": cassette.model_name("sub" if "sub" in cassette.clients else "root"),
        }
        used, ignored = _settings(doc, user, names)
        result = run_ask(used, path, question, cassette=cassette)
        model_calls: dict[str, Any] | None = cassette.finish().to_dict()
    else:
        note = NO_CASSETTE
        say(note)
        workdir = Path(tempfile.mkdtemp(prefix="rlm-rerun-"))
        try:
            root, sub = write_scripts(doc, workdir)
            names = {
                "model": f"scripted/{root}",
                "sub_model": f"scripted/{sub}",
                "protocol": original_protocol(doc),
            }
            used, ignored = _settings(doc, user, names)
            result = run_ask(used, path, question)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        model_calls = None
    new_doc = load_trace(result.trace_path) if result.trace_path else {"steps": []}
    return RerunResult(
        trace=str(trace_path),
        new_trace=result.trace_path,
        recorded_answer=doc.get("answer"),
        answer=new_doc.get("answer", result.answer),
        recorded_status=doc.get("status"),
        status=result.status,
        exit_code=result.exit_code,
        steps=compare_steps(doc.get("steps") or [], new_doc.get("steps") or []),
        ignored=ignored,
        model_calls=model_calls,
        note=note,
    )


def _calls(items: list[dict[str, Any]], key: str) -> str:
    return ", ".join(f"{c.get('role')} call {c.get(key)}" for c in items)


def _render_calls(calls: dict[str, Any], w: Callable[[str], Any], paint: Callable[[str, str], str]) -> None:
    """How the cassette served the re-run's model calls."""
    served = calls.get("by_key", 0) + len(calls.get("by_order") or [])
    w(f"model calls: {calls.get('recorded', 0)} recorded, {served} played")
    w(f" ({calls.get('by_key', 0)} matched by their request)\n")
    if calls.get("by_order"):
        w(
            f"  {paint('PROMPT CHANGED', 'yellow')}: served in recorded order: "
            f"{_calls(calls['by_order'], 'position')}\n"
        )
    if calls.get("unanswered"):
        w(
            f"  {paint('NOT RECORDED', 'red')}: asked by the re-run, no recording left: "
            f"{_calls(calls['unanswered'], 'asked')}\n"
        )
    if calls.get("unplayed"):
        w(
            f"  {paint('NOT ASKED', 'red')}: recorded, never asked by the re-run: "
            f"{_calls(calls['unplayed'], 'position')}\n"
        )


def render_rerun(result: RerunResult, out: TextIO) -> None:
    paint = painter(out)

    w = out.write
    w(f"Re-ran {result.trace} from its recorded model replies\n")
    if result.new_trace:
        w(f"new trace: {result.new_trace}\n")
    if result.note:
        w(f"note: {result.note}\n")
    for s in result.steps:
        if s.status == "same":
            w(f"  {s.node}.{s.index} {visible(s.recorded)}: {paint('same', 'green')}\n")
        elif s.status == "different":
            w(f"  {s.node}.{s.index} {paint('DIFFERENT', 'red')} ({' and '.join(s.what)})\n")
            w(f"      recorded: {visible(s.recorded)}\n      now:      {visible(s.now)}\n")
        else:
            w(
                f"  {s.node}.{s.index} {paint(s.status.upper(), 'red')} in the new run: {visible(s.recorded)}\n"
            )
    if result.model_calls is not None:
        _render_calls(result.model_calls, w, paint)
    if result.recorded_status != result.status:
        w(f"status: {result.recorded_status} -> {result.status}\n")
        if result.recorded_status in ("crashed", "interrupted"):
            w("(the recorded run did not finish: the re-run stops where its recorded replies end)\n")
    if result.answer_same:
        w(paint("The answer is the same.", "green") + "\n")
    else:
        w(paint("The answer differs.", "red") + "\n")
        w(f"  recorded: {visible(str(result.recorded_answer))}\n  now:      {visible(str(result.answer))}\n")
    out.flush()
