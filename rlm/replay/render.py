"""`rlm replay TRACE`: the investigation, step by step, from a trace on disk.

A trace holds the file's text and the model's replies exactly; drawn, every
control character in them is made visible (rlm.text.visible) and nothing is
read as rich markup (the tree is built of styled segments, never markup).

Replay only reads JSON and draws it, so it imports neither litellm nor the
engine: it has nothing to call, and it must stay fast (a 50-step trace in
well under half a second, start-up included). rich is imported only when a
tree is drawn; `--json` needs nothing but the standard library.

Over 400 lines: the tree and the JSON view share how nodes, steps, sub-calls and
findings are matched up; they are kept together so they cannot disagree.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

from rlm.text.textcap import cap_line
from rlm.text.visible import visible
from rlm.trace.reader import read_trace
from rlm.trace.redact import redact
from rlm.trace.schema import TraceDoc

REPLAY_SCHEMA = "rlm-replay/1"
PREVIEW_LINES = 6
CODE_LINES = 12
LINE_CHARS = 160


# -- loading ------------------------------------------------------------------------


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a trace checked against the schema; anything unusable is an InputError (exit 3)."""
    doc: TraceDoc = read_trace(path)
    # Traces are redacted when written; again here for traces from other
    # versions and keys set since. About 15 ms for 50 steps.
    shown: dict[str, Any] = redact(dict(doc))
    return shown


# -- the shape of the investigation -------------------------------------------------------


def subtree_ids(doc: dict[str, Any], node_id: str) -> set[str]:
    kids: dict[str, list[str]] = defaultdict(list)
    for node in doc.get("nodes") or []:
        if node.get("parent"):
            kids[node["parent"]].append(node["id"])
    out, todo = set(), [node_id]
    while todo:
        current = todo.pop()
        out.add(current)
        todo.extend(kids.get(current, []))
    return out


def child_steps(doc: dict[str, Any]) -> dict[str, int | None]:
    """For each child node, the step of its parent during which it ran.

    Traces record it as `parent_step` when the engine knows it; otherwise it is
    deduced from order: a step is recorded after its action finishes, so a
    child's steps are all written before the parent step that started it.
    None means the parent's step never finished (a crashed or interrupted run).
    """
    steps = doc.get("steps") or []
    last_pos: dict[str, int] = {}
    for pos, step in enumerate(steps):
        last_pos[step["node"]] = pos
    result: dict[str, int | None] = {}
    previous_end: dict[str, int] = {}
    for node in doc.get("nodes") or []:
        parent = node.get("parent")
        if not parent:
            continue
        if isinstance(node.get("parent_step"), int):
            result[node["id"]] = node["parent_step"]
            continue
        positions = [last_pos[n] for n in subtree_ids(doc, node["id"]) if n in last_pos]
        after = max(positions) if positions else previous_end.get(parent, -1)
        previous_end[parent] = after
        found = next((s["index"] for s in steps[after + 1 :] if s["node"] == parent), None)
        result[node["id"]] = found
    return result


def describe_action(action: dict[str, Any] | None) -> str:
    """One line for an action, as in the live progress."""
    if not action:
        return "(no action)"
    name = str(action.get("name"))
    a = action.get("args") or {}
    if name == "grep":
        extra = []
        if a.get("max_matches") not in (None, 50):
            extra.append(f"max {a['max_matches']}")
        if a.get("ignore_case"):
            extra.append("ignoring case")
        return f"grep /{cap_line(str(a.get('pattern')), 80)}/" + (f" ({', '.join(extra)})" if extra else "")
    if name == "peek":
        unit = a.get("unit", "lines")
        start, length = a.get("start"), a.get("length")
        if unit == "lines" and isinstance(start, int) and isinstance(length, int):
            return f"peek lines {start:,}-{start + length - 1:,}"
        return f"peek {length} {unit} from {start}"
    if name == "execute":
        lines = [ln for ln in str(a.get("code", "")).splitlines() if ln.strip()]
        first = lines[0].strip() if lines else ""
        more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
        return f"execute {cap_line(first, 80)}{more}"
    if name == "llm_query":
        where = ""
        if a.get("text") is not None:
            where = f" about a text of {len(str(a['text'])):,} characters"
        elif a.get("start_line") is not None or a.get("end_line") is not None:
            where = f" on lines {a.get('start_line') or 1}-{a.get('end_line') or 'end'}"
        return f"llm_query {cap_line(repr(a.get('question')), 80)}{where}"
    if name == "partition_map":
        size = ""
        if a.get("chunk_lines"):
            size = f" in chunks of {a['chunk_lines']:,} lines"
        elif a.get("chunk_chars"):
            size = f" in chunks of {a['chunk_chars']:,} characters"
        return f"partition_map {cap_line(repr(a.get('question')), 80)}{size}"
    if name == "final":
        return f"final {cap_line(repr(a.get('answer')), 100)}"
    return name


def step_stats(step: dict[str, Any]) -> str:
    call = step.get("model_call") or {}
    parts = []
    if isinstance(step.get("duration_s"), int | float):
        text = f"{step['duration_s']:.2f} s"
        if isinstance(call.get("latency_s"), int | float):
            text += f" (model {call['latency_s']:.2f} s)"
        parts.append(text)
    if call.get("prompt_tokens") is not None:
        parts.append(f"{call.get('prompt_tokens', 0):,}→{call.get('completion_tokens', 0):,} tokens")
    if isinstance(call.get("cost"), int | float):
        parts.append(f"${call['cost']:.4f}")
    return " · ".join(parts)


def _money(value: Any) -> str:
    return f"${value:.4f}" if isinstance(value, int | float) else "cost unknown"


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return "? bytes"
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


def headline(doc: dict[str, Any]) -> str:
    totals = doc.get("totals") or {}
    parts = [
        str(doc.get("status")),
        f"exit {doc.get('exit_code')}" if doc.get("exit_code") is not None else "no exit code",
        f"{len(doc.get('steps') or [])} steps",
    ]
    if totals:
        parts += [
            f"{totals.get('calls', 0)} calls",
            f"{totals.get('total_tokens', 0):,} tokens",
            _money(totals.get("cost_usd")),
        ]
        if isinstance(totals.get("elapsed_s"), int | float):
            parts.append(f"{totals['elapsed_s']:.1f} s")
    return " · ".join(parts)


def _preview_lines(text: str, full: bool) -> list[str]:
    # Lines end at \n only: a lone \r or \x1c in the file's text stays in its line, where it is
    # shown as an escape (str.splitlines would break the line there and hide it).
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    if full:
        return lines
    shown = [cap_line(ln, LINE_CHARS) for ln in lines[:PREVIEW_LINES]]
    if len(lines) > PREVIEW_LINES:
        shown.append(f"… {len(lines) - PREVIEW_LINES} more lines")
    return shown


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status_note(doc: dict[str, Any]) -> str | None:
    """Why a run has no regular ending, in words."""
    status = doc.get("status")
    if status == "crashed" and not doc.get("finished_at"):
        note = "the run did not finish: the process died before writing its end (killed, or crashed)"
        if _pid_alive(doc.get("pid")):
            note += f"; process {doc['pid']} is still alive, so the run may still be going"
        return note
    if status == "interrupted":
        return "the run was interrupted (Ctrl-C or SIGTERM); the trace holds every step up to then"
    if doc.get("error"):
        return f"the run stopped with an error: {doc['error']}"
    return None


# -- machine-readable ------------------------------------------------------------------------


def replay_json(doc: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """The steps in a flat, stable shape for scripts (`rlm replay --json`)."""
    depth = {n.get("id"): n.get("depth", 0) for n in doc.get("nodes") or []}
    by_evidence: dict[str, list[str]] = defaultdict(list)
    for f in doc.get("ledger") or []:
        by_evidence[str(f.get("evidence"))].append(str(f.get("id")))
    parents = child_steps(doc)
    steps = []
    for s in doc.get("steps") or []:
        call = s.get("model_call") or {}
        action = s.get("action") or {}
        steps.append(
            {
                "node": s["node"],
                "depth": depth.get(s["node"], 0),
                "index": s["index"],
                "action": action.get("name"),
                "args": action.get("args"),
                "parse_error": s.get("parse_error"),
                "observation": s.get("observation"),
                "duration_s": s.get("duration_s"),
                "model_latency_s": call.get("latency_s"),
                "prompt_tokens": call.get("prompt_tokens"),
                "completion_tokens": call.get("completion_tokens"),
                "cost": call.get("cost"),
                "reply": call.get("reply"),
                "findings": by_evidence.get(f"{s['node']}.s{s['index']}", []),
            }
        )
    nodes = [
        {**n, "parent_step": parents.get(n.get("id"), n.get("parent_step"))} for n in doc.get("nodes") or []
    ]
    return {
        "schema": REPLAY_SCHEMA,
        "trace": str(path),
        "trace_schema": doc.get("schema"),
        "run_id": doc.get("run_id"),
        "tool_version": doc.get("tool_version"),
        "started_at": doc.get("started_at"),
        "finished_at": doc.get("finished_at"),
        "status": doc.get("status"),
        "exit_code": doc.get("exit_code"),
        "note": status_note(doc),
        "question": doc.get("question"),
        "input": {
            k: (doc.get("input") or {}).get(k)
            for k in ("path", "display_name", "size", "lines", "format", "sha256")
        },
        "models": doc.get("models"),
        "nodes": nodes,
        "steps": steps,
        "subcalls": doc.get("subcalls") or [],
        "findings": doc.get("ledger") or [],
        "synthesis": doc.get("synthesis"),
        "answer": doc.get("answer"),
        "totals": doc.get("totals") or {},
        "warnings": doc.get("warnings") or [],
    }


# -- drawing ------------------------------------------------------------------------------


class _Drawer:
    """Builds the tree: nodes hold steps; a step holds its output, findings and sub-calls."""

    def __init__(self, doc: dict[str, Any], full: bool) -> None:
        self.Text = _Text
        self.doc = doc
        self.full = full
        self.steps_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in doc.get("steps") or []:
            self.steps_of[s["node"]].append(s)
        for steps in self.steps_of.values():
            steps.sort(key=lambda s: s["index"])
        self.findings: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for f in doc.get("ledger") or []:
            self.findings[str(f.get("evidence"))].append(f)
        self.subcalls: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
        for c in doc.get("subcalls") or []:
            self.subcalls[(c.get("node"), c.get("step"))].append(c)
        parents = child_steps(doc)
        self.children: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
        for n in doc.get("nodes") or []:
            if n.get("parent"):
                self.children[(n["parent"], parents.get(n["id"]))].append(n)

    def node_label(self, node: dict[str, Any]) -> Any:
        t = self.Text()
        t.append(f"{node.get('id')}", style="bold cyan")
        t.append(f" depth {node.get('depth', 0)}", style="dim")
        sl = node.get("slice")
        if isinstance(sl, dict):
            if "start_line" in sl:
                t.append(f" · lines {sl.get('start_line'):,}-{sl.get('end_line'):,}", style="dim")
            elif "text_chars" in sl:
                t.append(f" · a text of {sl['text_chars']:,} characters", style="dim")
        t.append(f" · {node.get('status', '?')}")
        usage = node.get("usage") or {}
        if usage:
            t.append(
                f" · {usage.get('total_tokens', 0):,} tokens · {_money(usage.get('cost_usd'))}", style="dim"
            )
        if node.get("parent"):
            t.append("\n")
            t.append(cap_line(str(node.get("question")), 200), style="italic")
        hint = node.get("query_hint")
        if isinstance(hint, dict) and hint.get("sql"):
            t.append(f"\nshown first: {cap_line(str(hint['sql']), 200)}", style="dim")
        return t

    def add_node(self, parent_tree: Any, node: dict[str, Any]) -> None:
        branch = parent_tree.add(self.node_label(node))
        for step in self.steps_of.get(str(node.get("id")), []):
            self.add_step(branch, node, step)
        for child in self.children.get((str(node.get("id")), None), []):
            unfinished = branch.add(self.Text("(started during a step that never finished)", style="yellow"))
            self.add_node(unfinished, child)
        for f in self.findings.get(str(node.get("id")), []):
            # A child's answer, recorded as a finding of its parent, with the child as evidence.
            branch.add(self._finding(f))
        if node.get("parent") and node.get("answer"):
            t = self.Text("answer: ", style="bold")
            t.append(cap_line(str(node["answer"]), 400) if not self.full else str(node["answer"]))
            t.append(f" ({node.get('answer_source', '?')})", style="dim")
            branch.add(t)

    def _finding(self, f: dict[str, Any]) -> Any:
        t = self.Text(f"{f.get('id')} ", style="bold green")
        t.append(f"{f.get('kind')}: ", style="green")
        t.append(str(f.get("text")) if self.full else cap_line(str(f.get("text")), 300))
        return t

    def add_step(self, branch: Any, node: dict[str, Any], step: dict[str, Any]) -> None:
        t = self.Text(f"{node.get('id')}.{step['index']} ", style="bold")
        if step.get("parse_error"):
            t.append("unusable reply: ", style="red")
            t.append(cap_line(str(step["parse_error"]), 200))
        else:
            t.append(describe_action(step.get("action")), style="magenta")
        stats = step_stats(step)
        if stats:
            t.append(f"  {stats}", style="dim")
        leaf = branch.add(t)
        action = step.get("action") or {}
        if action.get("name") == "execute":
            code = str((action.get("args") or {}).get("code", ""))
            lines = code.splitlines()
            if len(lines) > 1 or self.full:
                shown = lines if self.full else lines[:CODE_LINES]
                text = "\n".join(cap_line(ln, LINE_CHARS) for ln in shown)
                if len(lines) > len(shown):
                    text += f"\n… {len(lines) - len(shown)} more lines"
                leaf.add(self.Text(text, style="yellow"))
        if step.get("parse_error"):
            reply = ((step.get("model_call") or {}).get("reply") or {}).get("content") or ""
            if reply:
                leaf.add(self.Text("reply: " + cap_line(" ".join(reply.split()), 300), style="dim"))
        obs = step.get("observation") or {}
        preview = str(obs.get("preview") or "")
        if preview:
            lines = _preview_lines(preview, self.full)
            suffix = ""
            if isinstance(obs.get("chars"), int) and obs["chars"] > len(preview):
                suffix = f"\n(preview of {obs['chars']:,} characters)"
            style = "dim" if obs.get("ok", True) else "red"
            leaf.add(self.Text("\n".join(lines) + suffix, style=style))
        for call in self.subcalls.get((str(node.get("id")), step["index"]), []):
            c = self.Text("↳ sub-call ", style="cyan")
            c.append(f"{call.get('slice')}: ", style="dim")
            answer = " ".join(str(call.get("answer") or "").split())
            c.append(answer if self.full else cap_line(answer, 200))
            leaf.add(c)
        for child in self.children.get((str(node.get("id")), step["index"]), []):
            self.add_node(leaf, child)
        for f in self.findings.get(f"{node.get('id')}.s{step['index']}", []):
            leaf.add(self._finding(f))


class _Text:
    """Styled text as (text, style) segments: cheap to build, drawn plain or with rich."""

    def __init__(self, text: str = "", style: str | None = None) -> None:
        self.segments: list[tuple[str, str | None]] = [(text, style)] if text else []

    def append(self, text: str, style: str | None = None) -> None:
        self.segments.append((text, style))

    def lines(self) -> list[list[tuple[str, str | None]]]:
        out: list[list[tuple[str, str | None]]] = [[]]
        for text, style in self.segments:
            parts = text.split("\n")
            for i, part in enumerate(parts):
                if i:
                    out.append([])
                if part:
                    out[-1].append((part, style))
        return out


class _Tree:
    """A tree of styled labels, laid out with guide lines like `tree(1)`.

    rich's Tree measures and wraps every cell of every label: for a 50-step
    trace that is most of the replay time. Lines here are laid out once and
    left to the terminal to wrap.
    """

    def __init__(self, label: _Text) -> None:
        self.label = label
        self.children: list[_Tree] = []

    def add(self, label: _Text) -> _Tree:
        child = _Tree(label)
        self.children.append(child)
        return child

    def layout(
        self, prefix: str = "", first: str = "", rest: str = ""
    ) -> list[tuple[str, list[tuple[str, str | None]]]]:
        rows = []
        for i, line in enumerate(self.label.lines()):
            rows.append(((prefix + first) if i == 0 else (prefix + rest), line))
        for i, child in enumerate(self.children):
            last = i == len(self.children) - 1
            rows += child.layout(prefix + rest, "└── " if last else "├── ", "    " if last else "│   ")
        return rows


def render(doc: dict[str, Any], path: str | os.PathLike[str], out: TextIO, *, full: bool = False) -> None:
    """Draw the investigation: colour on a terminal (rich), plain text otherwise."""
    Text = _Text
    inp = doc.get("input") or {}
    head = Text()
    head.append(f"rlm run {doc.get('run_id', Path(path).stem)}", style="bold")
    head.append(f" · {headline(doc)}")
    head.append(f"\nQuestion: {doc.get('question')}", style="bold")
    sha = str(inp.get("sha256") or "")
    head.append(
        f"\nInput: {inp.get('display_name') or inp.get('path')} · {_size(inp.get('size'))} · "
        f"{inp.get('lines', '?'):,} lines · {inp.get('format', '?')} · sha256 {sha[:12]}"
        if isinstance(inp.get("lines"), int)
        else f"\nInput: {inp.get('path')}",
        style="dim",
    )
    models = doc.get("models") or {}
    if models:
        model_text = str(models.get("root"))
        if models.get("sub") and models.get("sub") != models.get("root"):
            model_text += f" (sub-calls: {models['sub']})"
        head.append(
            f"\nModel: {model_text} · rlm {doc.get('tool_version')} · {doc.get('started_at')}", style="dim"
        )
    parts: list[_Tree] = [_Tree(head)]
    note = status_note(doc)
    if note:
        parts.append(_Tree(Text(note, style="bold yellow")))
    for w in doc.get("warnings") or []:
        parts.append(_Tree(Text(f"warning: {w}", style="yellow")))

    drawer = _Drawer(doc, full)
    tree = _Tree(Text("investigation", style="bold"))
    roots = [n for n in doc.get("nodes") or [] if not n.get("parent")]
    for node in roots:
        drawer.add_node(tree, node)
    known = {n.get("id") for n in doc.get("nodes") or []}
    orphans = [s for s in doc.get("steps") or [] if s["node"] not in known]
    for s in orphans:
        drawer.add_step(tree, {"id": s["node"]}, s)
    if not roots and not orphans:
        tree.add(Text("(no steps were recorded)", style="dim"))
    parts.append(tree)

    synthesis = doc.get("synthesis")
    if isinstance(synthesis, dict):
        t = Text("Synthesis: ", style="bold")
        t.append(str(synthesis.get("source")))
        if synthesis.get("prompt_tokens") is not None:
            t.append(f" · {synthesis['prompt_tokens']:,} prompt tokens", style="dim")
        if synthesis.get("error"):
            t.append(f" · {synthesis['error']}", style="red")
        parts.append(_Tree(t))
    answer = doc.get("answer")
    t = Text("Answer: ", style="bold green")
    if answer:
        t.append(str(answer))
    else:
        t.append(doc.get("message") or "(no answer)", style="yellow")
    parts.append(_Tree(t))
    # Every text from the trace (the file's lines, the model's replies) is made visible, on a
    # terminal or not: a replay is read by a person, and `--json` keeps the exact values.
    rows = [
        (guide, [(visible(text), style) for text, style in line])
        for part in parts
        for guide, line in part.layout()
    ]
    if hasattr(out, "isatty") and out.isatty():
        _print_rich(rows, out)
    else:
        out.write("".join(guide + "".join(text for text, _ in line) + "\n" for guide, line in rows))
        out.flush()


def _print_rich(rows: list[tuple[str, list[tuple[str, str | None]]]], out: TextIO) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, emoji=False)
    text = Text()
    for guide, line in rows:
        text.append(guide, style="dim")
        for part, style in line:
            text.append(part, style=style)
        text.append("\n")
    console.print(text, end="", soft_wrap=True)
