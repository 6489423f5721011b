"""`rlm replay TRACE --rerun`: drive the whole loop again from the recorded replies.

The model replies in the trace become two scripts for the scripted provider
(rlm/model/scripted.py): one for the root model (its turns, then its synthesis) and
one for the sub-model (child nodes' turns and syntheses in the order they were
asked for, plus plain sub-call answers matched by their prompt). The real
engine then runs with them, through litellm, with no network, and writes a
new trace. What changed between the two runs is reported step by step; the
point is to learn whether this version of the tool still reaches the same answer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rlm.replay.paint import painter
from rlm.replay.render import child_steps, describe_action
from rlm.replay.replay_settings import RERUN_FROM_TRACE, RERUN_USES, replay_settings
from rlm.replay.verify import resolve_input
from rlm.run.settings import Settings, load_settings
from rlm.text.visible import visible


def _scripted(reply: dict[str, Any] | None) -> dict[str, Any]:
    """A recorded reply as a scripted-provider reply (tool arguments kept as the raw text)."""
    reply = reply or {}
    out: dict[str, Any] = {"content": reply.get("content") or None}
    calls = reply.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [{"name": c.get("name", ""), "args": c.get("arguments") or "{}"} for c in calls]
    return out


def _synthesis_reply(source: Any, content: Any, error: Any) -> dict[str, Any] | None:
    """What the synthesis call of a node should get; None when the run made no such call."""
    if source == "synthesis":
        return {"content": str(content or "")}
    if source in ("draft", "findings"):
        # The call failed or answered nothing usable; an empty reply leads to the same fallback.
        return {"content": ""}
    if error:
        return {"error": "bad_request", "message": str(error)}
    return None  # "none" without an error: nothing to synthesize from, no call was made


def original_protocol(doc: dict[str, Any]) -> str:
    chosen = (doc.get("settings") or {}).get("protocol")
    if chosen in ("tools", "text"):
        return str(chosen)
    for step in doc.get("steps") or []:
        call = step.get("model_call") or {}
        if (call.get("reply") or {}).get("tool_calls"):
            return "tools"
        if any(m.get("role") == "tool" for m in call.get("messages") or []):
            return "tools"
    return "text"


def build_scripts(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(root script, sub-model script) reproducing every model call of the run."""
    from rlm.run import prompts

    steps_of: dict[str, list[dict[str, Any]]] = {}
    for s in doc.get("steps") or []:
        steps_of.setdefault(s["node"], []).append(s)
    for steps in steps_of.values():
        steps.sort(key=lambda s: s["index"])
    parents = child_steps(doc)
    nodes = doc.get("nodes") or []
    kids: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for n in nodes:
        if n.get("parent"):
            kids.setdefault((n["parent"], parents.get(n["id"])), []).append(n)

    sub_replies: list[dict[str, Any]] = []

    def child(node: dict[str, Any]) -> None:
        # A child's calls, in the order they are made: its turn, the grandchildren
        # that turn started, the next turn ..., then its synthesis.
        for step in steps_of.get(node["id"], []):
            sub_replies.append(_scripted((step.get("model_call") or {}).get("reply")))
            for grandchild in kids.get((node["id"], step["index"]), []):
                child(grandchild)
        reply = _synthesis_reply(node.get("answer_source"), node.get("answer"), None)
        if reply is not None:
            sub_replies.append(reply)

    root_replies: list[dict[str, Any]] = []
    for root in (n for n in nodes if not n.get("parent")):
        for step in steps_of.get(root["id"], []):
            root_replies.append(_scripted((step.get("model_call") or {}).get("reply")))
            for c in kids.get((root["id"], step["index"]), []):
                child(c)
    synthesis = doc.get("synthesis") or {}
    reply = (
        {"content": str((synthesis.get("reply") or {}).get("content") or "")}
        if synthesis.get("reply")
        else _synthesis_reply(synthesis.get("source"), None, synthesis.get("error"))
    )
    if reply is not None:
        root_replies.append(reply)

    # Plain sub-calls (llm_query on a small slice, partition_map chunks) may run
    # in parallel: each is matched by its own prompt, once.
    head = re.escape(prompts.SUBQUERY_SYSTEM[:60])
    rules = [
        {
            "match": f"^system: {head}.*Question: {re.escape(str(c.get('question', '')))}\\n\\n"
            f"Excerpt \\({re.escape(str(c.get('slice', '')))}\\):",
            "reply": {"content": str(c.get("answer") or "")},
            "times": 1,
        }
        for c in doc.get("subcalls") or []
    ]
    return {"replies": root_replies}, {"replies": sub_replies, "rules": rules}


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

    @property
    def answer_same(self) -> bool:
        return self.recorded_answer == self.answer

    @property
    def ok(self) -> bool:
        return (
            self.answer_same
            and self.recorded_status == self.status
            and all(s.status == "same" for s in self.steps)
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
    doc: dict[str, Any], user: Settings, root: Path, sub: Path
) -> tuple[Settings, dict[str, tuple[str, str]]]:
    """The user's settings, the loop-shaping ones the trace recorded, and the replay's own."""
    fixed = dict(
        model=f"scripted/{root}",
        sub_model=f"scripted/{sub}",
        api_base=None,
        api_key=None,
        gguf=None,
        protocol=original_protocol(doc),
        # One sub-call at a time: sub-model turns then come in the recorded order.
        concurrency=1,
        retries=0,
        trace=True,
        # A re-run replays what was recorded: it neither reads the memory (which has moved on
        # since) nor adds to it, and asks no cache.
        memory=None,
        no_memory=True,
    )
    return replay_settings(doc, user, from_trace=RERUN_FROM_TRACE, uses=RERUN_USES, fixed=fixed)


def rerun_trace(
    doc: dict[str, Any],
    *,
    input_override: str | None,
    trace_path: str | os.PathLike[str],
    settings: Settings | None = None,
) -> RerunResult:
    """Drive the loop again under the user's `settings` (default: as flags, environment and
    config resolve them; its trace_dir is where the new trace goes)."""
    from rlm.replay.render import load_trace
    from rlm.run.wiring import run_ask

    path = resolve_input(doc, input_override, trace_path)
    root_script, sub_script = build_scripts(doc)
    workdir = Path(tempfile.mkdtemp(prefix="rlm-rerun-"))
    try:
        root, sub = workdir / "root.json", workdir / "sub.json"
        root.write_text(json.dumps(root_script), encoding="utf-8")
        sub.write_text(json.dumps(sub_script), encoding="utf-8")
        used, ignored = _settings(doc, settings or load_settings(), root, sub)
        result = run_ask(used, path, str(doc.get("question") or ""))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
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
    )


def render_rerun(result: RerunResult, out: TextIO) -> None:
    paint = painter(out)

    w = out.write
    w(f"Re-ran {result.trace} from its recorded model replies\n")
    if result.new_trace:
        w(f"new trace: {result.new_trace}\n")
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
