"""`rlm replay TRACE --verify`: re-run the deterministic steps and show drift.

peek, grep and execute steps are run again, in their recorded order, in one
fresh sandbox worker per node (so variables carry from cell to cell as they
did in the run), through the same Node code that ran them the first time.
Model calls made from inside code are answered from the trace, never by a
model. Each step is reported same or different, with a diff of the output
preview. The input is checked by sha256 first: a changed file is reported in
words (and the run then cannot verify); a missing one is an InputError.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rlm.errors import InputError, RlmError
from rlm.replay.paint import painter
from rlm.replay.replay_settings import VERIFY_FROM_TRACE, VERIFY_USES, observation_chars, replay_settings
from rlm.run.settings import Settings, load_settings
from rlm.text.visible import visible

DIFF_LINES = 40


# -- the input --------------------------------------------------------------------------


def resolve_input(doc: dict[str, Any], override: str | None, trace_path: str | os.PathLike[str]) -> str:
    """The file the run read: --input, else the recorded path, else its name near the trace or here."""
    if override is not None:
        p = Path(override)
        if not p.is_file():
            raise InputError(f"--input {override}: no such file")
        return str(p.resolve())
    inp = doc.get("input") or {}
    recorded = inp.get("path")
    display = inp.get("display_name")
    candidates: list[Path] = []
    if recorded:
        candidates.append(Path(recorded))
    if display and display != "<stdin>" and not Path(display).is_absolute():
        candidates.append(Path.cwd() / display)
        # Example traces in a repository name their input relative to its root.
        for ancestor in list(Path(trace_path).resolve().parents)[:4]:
            candidates.append(ancestor / display)
    for c in candidates:
        if c.is_file():
            return str(c.resolve())
    if display == "<stdin>":
        raise InputError(
            "the run read standard input, which was not kept: pass --input FILE with the same data"
        )
    raise InputError(
        f"the input of this run is missing: {recorded or display} (pass --input FILE to use a copy)"
    )


def resolve_parts(parts: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The files of a several-file run, in the order it read them, and a line for each that
    changed since (its sha256 then and now). Raises InputError naming a part that is gone."""
    paths: list[str] = []
    changed: list[str] = []
    for part in parts:
        name = str(part.get("name") or part.get("path") or "?")
        candidates = [str(c) for c in (part.get("path"), name) if c]
        found = next((str(Path(c).resolve()) for c in candidates if Path(c).is_file()), None)
        if found is None:
            raise InputError(f"the input of this run is missing: {name} (one of its {len(parts)} files)")
        paths.append(found)
        was = part.get("sha256")
        if was:
            now = sha256_of(found)
            if was != now:
                changed.append(f"{name} has changed since the run: its sha256 was {was}, it is now {now}")
        else:  # read in part only (a time range): its size and time of change are what was kept
            st = os.stat(found)
            if (st.st_size, st.st_mtime_ns) != (part.get("size"), part.get("mtime_ns")):
                changed.append(f"{name} has changed since the run: its size or time of change differs")
    return paths, changed


def sha256_of(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# -- answering model calls from the record ------------------------------------------------


def _slice_start(where: Any) -> int:
    m = re.search(r"(\d[\d,]*)", str(where))
    return int(m.group(1).replace(",", "")) if m else 0


class RecordedBridge:
    """Serves llm_query / partition_map / recall calls from model code with what the run got.

    `bridge_calls` (when the trace has them) are exact; otherwise the sub-call
    answers recorded for the same step, and the answers of child nodes, are
    matched by question.
    """

    def __init__(self, doc: dict[str, Any]) -> None:
        self.exact: dict[tuple[str, int], deque[dict[str, Any]]] = defaultdict(deque)
        for call in doc.get("bridge_calls") or []:
            self.exact[(call.get("node"), call.get("step"))].append(call)
        self.subcalls: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for call in doc.get("subcalls") or []:
            self.subcalls[(call.get("node"), call.get("step"))].append(dict(call))
        self.children: dict[tuple[str, str], deque[str]] = defaultdict(deque)
        for node in doc.get("nodes") or []:
            if node.get("parent") and node.get("answer"):
                self.children[(node["parent"], str(node.get("question", "")).strip())].append(node["answer"])
        self.current: tuple[str, int] = ("", 0)
        self.used_record = False

    def partition_answers(self, key: tuple[str, int], question: str) -> list[str] | None:
        calls = [
            c for c in self.subcalls.get(key, []) if not c.get("_used") and c.get("question") == question
        ]
        if not calls:
            return None
        for c in calls:
            c["_used"] = True
        calls.sort(key=lambda c: _slice_start(c.get("slice")))
        return [str(c.get("answer") or "") or "(the helper model gave an empty answer)" for c in calls]

    def __call__(self, name: str, args: dict[str, Any]) -> Any:
        key = self.current
        queue = self.exact.get(key)
        if queue:
            rec = queue.popleft()
            self.used_record = True
            if rec.get("error"):
                raise RlmError(str(rec["error"]))
            return rec.get("result")
        question = str(args.get("question") or "").strip()
        if name == "llm_query":
            for c in self.subcalls.get(key, []):
                if not c.get("_used") and c.get("question") == question:
                    c["_used"] = True
                    self.used_record = True
                    return str(c.get("answer") or "") or "(the helper model gave an empty answer)"
            answers = self.children.get((key[0], question))
            if answers:
                self.used_record = True
                return answers.popleft()
        if name == "partition_map":
            found = self.partition_answers(key, question)
            if found is not None:
                self.used_record = True
                return found
        raise RlmError(f"the result of this {name} call is not in the trace, so it cannot be replayed")


# -- running the steps ---------------------------------------------------------------------


@dataclass
class StepCheck:
    node: str
    index: int
    action: str
    status: str  # same | different | skipped
    recorded: str = ""
    now: str = ""
    diff: list[str] = field(default_factory=list)
    note: str | None = None


@dataclass
class VerifyReport:
    trace: str
    input_path: str
    recorded_sha256: str | None
    actual_sha256: str
    checks: list[StepCheck] = field(default_factory=list)
    restarts: int = 0
    internal_errors: list[str] = field(default_factory=list)
    # The user's settings the steps ran under, and the trace's values that were not used.
    used: dict[str, Any] = field(default_factory=dict)
    ignored: dict[str, tuple[str, str]] = field(default_factory=dict)
    # A run over several files: how many were checked, and a line for each that changed.
    parts_checked: int = 0
    changed_parts: list[str] = field(default_factory=list)

    @property
    def input_changed(self) -> bool:
        if self.changed_parts:
            return True
        # A run stopped before its input's hash was known recorded none: nothing to compare.
        return self.recorded_sha256 is not None and self.recorded_sha256 != self.actual_sha256

    @property
    def counts(self) -> dict[str, int]:
        out = {"same": 0, "different": 0, "skipped": 0}
        for c in self.checks:
            out[c.status] += 1
        return out

    @property
    def ok(self) -> bool:
        return not self.input_changed and self.counts["different"] == 0 and not self.internal_errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "input": self.input_path,
            "recorded_sha256": self.recorded_sha256,
            "actual_sha256": self.actual_sha256,
            "input_changed": self.input_changed,
            "changed_parts": self.changed_parts,
            "ok": self.ok,
            "counts": self.counts,
            "internal_errors": self.internal_errors,
            "settings": self.used,
            "recorded_settings_not_used": {k: was for k, (was, _) in self.ignored.items()},
            "steps": [asdict(c) for c in self.checks],
        }


class _Collector:
    """The ActionHost of a re-run: findings are not re-recorded; restarts and faults are counted."""

    def __init__(self, cell_seconds: float) -> None:
        self.cell_seconds = cell_seconds
        self.restarts = 0
        self.internal_errors: list[str] = []

    def add_finding(self, text: str, kind: str, node_id: str, step: int, **_: Any) -> None:
        return None

    def note_restart(self, node_id: str, why: str) -> None:
        self.restarts += 1

    def report_internal(self, node_id: str, message: str) -> None:
        self.internal_errors.append(f"{node_id}: {message}")


def _spec(node: dict[str, Any], profile: Any, settings: Any) -> Any:
    """The worker the run had for this node, from the same factory (None: a text built in the run)."""
    from rlm.run.workers import worker_spec_for

    sl = node.get("slice")
    if sl is not None and not (isinstance(sl, dict) and "start_line" in sl):
        return None
    return worker_spec_for(
        profile, settings, sl.get("start_line") if sl else None, sl.get("end_line") if sl else None
    )


def _diff(old: str, new: str) -> list[str]:
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), "recorded", "now", lineterm="", n=1)
    )
    if len(lines) > DIFF_LINES:
        lines = lines[:DIFF_LINES] + [f"… {len(lines) - DIFF_LINES} more diff lines"]
    return lines


def verify_trace(
    doc: dict[str, Any],
    *,
    input_override: str | None,
    trace_path: str | os.PathLike[str],
    settings: Settings | None = None,
) -> VerifyReport:
    """Re-run the steps under `settings`, the user's own (default: as flags, environment
    and config resolve them); the trace supplies only what reproduces its observations."""
    from rlm.input.parts import open_inputs
    from rlm.input.source import default_cache_dir, open_source
    from rlm.input.timerange import TimeRange
    from rlm.run.runner import WORKER_ACTIONS, ActionRunner
    from rlm.run.settings import cell_seconds_for
    from rlm.sandbox.client import Sandbox, WorkerLost
    from rlm.trace.writer import preview

    parts = (doc.get("input") or {}).get("parts")
    if parts and input_override is None:
        # Several files read as one: each is checked by its own sha256 and named when it changed
        # (the text they made is rebuilt from them, in the order the run read them).
        paths, changed = resolve_parts(parts)
        report = VerifyReport(
            trace=str(trace_path),
            input_path=f"{len(paths)} files: {paths[0]} … {paths[-1]}",
            recorded_sha256=None,
            actual_sha256="",
            parts_checked=len(paths),
            changed_parts=changed,
        )
    else:
        path = resolve_input(doc, input_override, trace_path)
        paths = [path]
        report = VerifyReport(
            trace=str(trace_path),
            input_path=path,
            recorded_sha256=(doc.get("input") or {}).get("sha256"),
            actual_sha256=sha256_of(path),
        )
    settings, report.ignored = replay_settings(
        doc, settings or load_settings(), from_trace=VERIFY_FROM_TRACE, uses=VERIFY_USES
    )
    # A run over a time range read the lines of the range it resolved (`2h` then is not `2h` now).
    time_range = TimeRange.from_dict((doc.get("input") or {}).get("time_range"))
    if len(paths) > 1 or (time_range is not None and parts and input_override is None):
        names = {p: str(part.get("name") or p) for p, part in zip(paths, parts or [], strict=True)}
        source = open_inputs(
            paths, cache_dir=settings.cache_dir, order="given", names=names, time_range=time_range
        )
    else:
        source = open_source(paths[0], cache_dir=settings.cache_dir)
    host = _Collector(cell_seconds_for(settings, source.profile.size))
    report.used = {
        "cache_dir": settings.cache_dir or default_cache_dir(),
        "cell_seconds": host.cell_seconds,
        "memory_headroom_mb": settings.memory_headroom_mb,
        "max_observation_chars": settings.max_observation_chars,
    }
    bridge = RecordedBridge(doc)
    steps_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in doc.get("steps") or []:
        steps_of[s["node"]].append(s)
    try:
        for node in doc.get("nodes") or []:
            node_id = str(node.get("id"))
            steps = sorted(steps_of.get(node_id, []), key=lambda s: s["index"])
            spec = _spec(node, source.profile, settings)
            sandbox = None
            # One runner per node, as in the run: the repeat guard sees the node's earlier steps.
            runner = ActionRunner(
                node_id,
                host,
                observation_chars(node.get("observation_chars"), settings.max_observation_chars),
            )
            runner.observed = True
            try:
                for step in steps:
                    action = step.get("action") or {}
                    name = action.get("name")
                    args = dict(action.get("args") or {})
                    label = f"{node_id}.{step['index']}"
                    if name == "partition_map" and sandbox is not None:
                        # Its answers went into a sandbox variable later cells may read.
                        answers = bridge.partition_answers(
                            (node_id, step["index"]), str(args.get("question", "")).strip()
                        )
                        if answers is not None:
                            sandbox.request(
                                "set", timeout=30, name=args.get("result_var") or "results", value=answers
                            )
                        runner.state += 1  # as the run's runner counted it
                    if name not in WORKER_ACTIONS:
                        continue
                    recorded = str((step.get("observation") or {}).get("preview") or "")
                    if spec is None:
                        report.checks.append(
                            StepCheck(
                                node_id,
                                step["index"],
                                name,
                                "skipped",
                                recorded,
                                note="this node worked on a text built during the run, which the trace does not keep",
                            )
                        )
                        continue
                    if sandbox is None:
                        sandbox = Sandbox(spec, bridge=bridge)
                        try:
                            sandbox.start()
                        except WorkerLost as exc:
                            raise InputError(f"the sandbox could not start for {label}: {exc}") from None
                        runner.sandbox = sandbox
                    bridge.current = (node_id, step["index"])
                    outcome = runner.act(name, args, step["index"], visible_from=0, subcall=None)
                    now = preview(outcome.observation)
                    same = now == recorded
                    report.checks.append(
                        StepCheck(
                            node_id,
                            step["index"],
                            name,
                            "same" if same else "different",
                            recorded,
                            now,
                            [] if same else _diff(recorded, now),
                        )
                    )
            finally:
                if sandbox is not None:
                    sandbox.close()
    finally:
        source.close()
    report.restarts = host.restarts
    report.internal_errors = host.internal_errors
    return report


# -- the report ------------------------------------------------------------------------------


def render_verify(report: VerifyReport, out: TextIO) -> None:
    """Plain lines (they are diffs: colour adds little, a terminal gets it anyway)."""
    paint = painter(out)

    w = out.write
    w(f"Verifying {report.trace}\n")
    w(f"input: {visible(str(report.input_path))}\n")
    if report.changed_parts:
        for line in report.changed_parts:
            w(paint(f"{visible(line)}. Steps that read it may differ.\n", "yellow"))
    elif report.parts_checked:
        w(
            f"The input's {report.parts_checked} files are the ones the run read (the sha256 of each matches).\n"
        )
    elif report.input_changed:
        w(
            paint(
                f"The input has changed since the run: its sha256 was {report.recorded_sha256}, "
                f"it is now {report.actual_sha256}. Steps that read it may differ.\n",
                "yellow",
            )
        )
    elif report.recorded_sha256 is None:
        w("The trace has no sha256 of its input (the run stopped before it was known): not checked.\n")
    else:
        w("The input is the one the run read (sha256 matches).\n")
    for c in report.checks:
        mark = {
            "same": paint("same", "green"),
            "different": paint("DIFFERENT", "red"),
            "skipped": paint("skipped", "yellow"),
        }
        w(f"  {c.node}.{c.index} {visible(c.action)}: {mark[c.status]}\n")
        if c.note:
            w(f"      {visible(c.note)}\n")
        for line in c.diff:
            color = "red" if line.startswith("-") else "green" if line.startswith("+") else "dim"
            w("      " + paint(line, color) + "\n")
    counts = report.counts
    total = counts["same"] + counts["different"]
    summary = f"{total} steps re-run: {counts['same']} same, {counts['different']} different"
    if counts["skipped"]:
        summary += f", {counts['skipped']} skipped"
    if report.restarts:
        summary += f" ({report.restarts} sandbox restarts)"
    if not total and not counts["skipped"]:
        summary = "no peek, grep or execute steps to re-run"
    w(summary + ".\n")
    for message in report.internal_errors:
        w(paint(f"internal error in the sandbox: {message}\n", "red"))
    w("All re-run steps match.\n" if report.ok else "Verification failed.\n")
    out.flush()
