"""`rlm logs`: the recent runs in a trace directory, newest first.

Trace names sort by time, so the newest are found without opening the rest.
A run still going, or one that died before its end, is listed by its event log
(`<run_id>.jsonl`, rlm.trace.eventlog) until its document is written.
A file that cannot be read is listed as unreadable rather than hiding the others.
A question or answer is shown with its control characters made visible and as
rich Text, never markup: a trace's text cannot paint the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlm.errors import InputError
from rlm.trace.eventlog import document_path
from rlm.trace.reader import read_trace
from rlm.trace.redact import redact
from rlm.trace.retention import TRACE_NAME


def trace_files(directories: str | Path | list[str] | list[Path]) -> list[Path]:
    """Traces in the directories, newest first (names start with the start time): every
    document, and the event log of each run that has none yet (only logs named as a run
    id: other JSON-lines files in the folder are not traces)."""
    found: list[Path] = []
    for d in map(Path, directories if isinstance(directories, list) else [directories]):
        if d.is_dir():
            found.extend(p for p in d.glob("*.json") if p.is_file())
            found.extend(
                p
                for p in d.glob("*.jsonl")
                if TRACE_NAME.fullmatch(p.name) and p.is_file() and not document_path(p).is_file()
            )
    return sorted(found, key=lambda p: document_path(p).name, reverse=True)


def latest_trace(directories: str | Path | list[str] | list[Path]) -> Path | None:
    files = trace_files(directories)
    return files[0] if files else None


def summarize(path: Path) -> dict[str, Any]:
    """One row of `rlm logs`: time, question, answer, status, cost, steps."""
    row: dict[str, Any] = {"trace": str(path), "run_id": path.stem}
    try:
        doc = read_trace(path)
    except InputError as exc:
        row.update(status="unreadable", error=exc.message.splitlines()[0][:200])
        return row
    totals = doc.get("totals") or {}
    row.update(
        started_at=doc.get("started_at"),
        status=doc.get("status"),
        exit_code=doc.get("exit_code"),
        question=doc.get("question"),
        answer=doc.get("answer"),
        input=(doc.get("input") or {}).get("display_name"),
        steps=len(doc.get("steps") or []),
        cost_usd=totals.get("cost_usd"),
        tokens=totals.get("total_tokens"),
        elapsed_s=totals.get("elapsed_s"),
    )
    served = _served_by(doc)
    if served:
        row["deployments"] = served
    shown: dict[str, Any] = redact(row)
    return shown


def _served_by(doc: Mapping[str, Any]) -> dict[str, int]:
    """How many calls each deployment of a model_list group answered (rlm.model.deployments)."""
    counts: dict[str, int] = {}
    cassette = doc.get("cassette")
    calls = cassette.get("calls") if isinstance(cassette, dict) else None
    for call in calls if isinstance(calls, list) else []:
        name = call.get("deployment") if isinstance(call, dict) else None
        if isinstance(name, str):
            counts[name] = counts.get(name, 0) + 1
    return counts


def list_runs(directories: str | Path | list[str] | list[Path], limit: int) -> list[dict[str, Any]]:
    return [summarize(p) for p in trace_files(directories)[: max(0, limit)]]


def render_runs(rows: list[dict[str, Any]], out: Any) -> None:
    """A table on a terminal, tab-free aligned plain text otherwise."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from rlm.text.textcap import cap_line
    from rlm.text.visible import visible

    def cell(value: str) -> Text:
        return Text(visible(value))

    tty = hasattr(out, "isatty") and out.isatty()
    console = Console(
        file=out, force_terminal=tty, color_system="auto" if tty else None, width=None if tty else 160
    )
    table = Table(box=None if not tty else None, show_edge=False, pad_edge=False, header_style="bold")
    for col in ("time", "status", "steps", "cost", "question", "answer", "trace"):
        table.add_column(col, no_wrap=col in ("time", "trace"), overflow="fold")
    for r in rows:
        cost = r.get("cost_usd")
        answer = " ".join(str(r.get("answer") or r.get("error") or "").split())
        table.add_row(
            cell(str(r.get("started_at") or "?").replace("T", " ")[:19]),
            cell(str(r.get("status"))),
            cell(str(r.get("steps", ""))),
            f"${cost:.4f}" if isinstance(cost, int | float) else "?",
            cell(cap_line(" ".join(str(r.get("question") or "").split()), 50)),
            cell(cap_line(answer, 60)),
            cell(Path(str(r["trace"])).name),
        )
    console.print(table)
