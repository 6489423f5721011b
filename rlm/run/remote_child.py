"""A child investigation run on another machine: the task a Dask worker runs for a slice too big
for one sub-call, under `--executor dask://HOST:PORT` (rlm.run.executor).

The parent sends the child everything it reads, as data: its slice's bytes (zstd), the slice's
rows of the input's table as a DuckDB file of their own (numbered from 1, as the child's sql()
sees them at home), each input file's lines within the slice, the prompt's profile of it, the
run's settings, the sub-model as the worker rebuilds it (rlm.model.remote_call.ClientSpec) and
the child's share of the run's budget. Nothing has to be shared between the machines but the
environment Dask already asks for (the same Python packages): a worker that reads no file of
the parent's reads the same bytes.

On the worker the child runs as it runs at home: a node one level down (rlm.run.node) with a
sandboxed worker of its own over the slice, its own children if it needs them (in threads
there), its own synthesis. It sends back its answer, its findings, every node's usage and the
trace's records (nodes, steps, bridge calls, sub-calls, retries, model calls for the cassette);
the parent (`adopt_child`) records them as if made at home, charges the budget what was used,
and puts the findings in its ledger. A stop in the parent (Ctrl-C, SIGTERM, a budget) sets the
run's stop event, which the child looks at before each model call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

from rlm.model.budget import Usage
from rlm.model.remote_call import ClientSpec
from rlm.run.ledger import Finding
from rlm.run.services import RunServices
from rlm.run.settings import Settings
from rlm.text.sqltext import sql_string
from rlm.text.tabledb import NO_EXTENSION_LOADING

# The trace's lists a child's records go to, as TraceWriter names them.
RECORDS = ("nodes", "steps", "bridge_calls", "subcalls", "provider_events")


@dataclass(frozen=True)
class ChildTask:
    """What a child on another machine needs: plain data, picklable."""

    node_id: str
    depth: int
    question: str
    profile_block: str  # the slice as the child's prompt describes it
    description: str | None
    n_lines: int
    display_name: str
    format: str
    text: bytes  # the slice's UTF-8 bytes, one zstd frame
    table: bytes | None  # a DuckDB file of the slice's rows, line_no from 1; None: no table
    table_info: dict[str, Any] | None  # the input's table as profiled (columns, common values)
    parts: list[list[Any]] | None  # [name, first, last, runs] of each file within the slice
    settings: Settings
    model: ClientSpec
    cell_seconds: float
    calls: int
    tokens: int
    cost: float | None
    seconds: float | None  # the run's loop time left when the child was sent
    stop_event: str  # the name of the run's Dask event that a stop sets


def pack_text(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def slice_table(table_path: str, first: int, last: int, directory: str) -> bytes:
    """Rows `first`..`last` of the input's table, numbered from 1, as a DuckDB file's bytes: what
    the child's sql() reads, as a child at home reads its window of the table."""
    import duckdb

    dest = os.path.join(directory, f"slice-{first}-{last}.duckdb")
    con = duckdb.connect(dest, config=NO_EXTENSION_LOADING)
    try:
        con.execute(f"ATTACH {sql_string(table_path)} AS whole (READ_ONLY)")
        con.execute(
            f"CREATE TABLE log AS SELECT * REPLACE (line_no - {first - 1} AS line_no) "
            f"FROM whole.main.log WHERE line_no BETWEEN {first} AND {last} ORDER BY line_no"
        )
        con.execute("DETACH whole")
    finally:
        con.close()
    try:
        with open(dest, "rb") as fh:
            return fh.read()
    finally:
        os.remove(dest)


def slice_parts(parts: list[list[Any]] | None, first: int, last: int) -> list[list[Any]] | None:
    """The input's files within lines `first`..`last`, numbered from the slice's first line, each
    with the runs of its own line numbers (so grep and peek name a line's file and its number in
    that file as at home)."""
    if not parts:
        return None
    out: list[list[Any]] = []
    for name, lo, hi, *rest in parts:
        a, b = max(int(lo), first), min(int(hi), last)
        if a > b:
            continue
        runs = rest[0] if rest else [[1, int(hi) - int(lo) + 1]]
        kept_from, kept_to = a - int(lo) + 1, b - int(lo) + 1  # the part's kept lines in the slice
        cut, at = [], 1
        for own, count in runs:
            lo_k, hi_k = max(at, kept_from), min(at + int(count) - 1, kept_to)
            if lo_k <= hi_k:
                cut.append([int(own) + lo_k - at, hi_k - lo_k + 1])
            at += int(count)
        out.append([name, a - first + 1, b - first + 1, cut])
    return out


def usage_of(data: Any) -> Usage:
    """A Usage from what a worker sent (numbers only; anything else counts as nothing)."""
    out = Usage()
    if isinstance(data, dict):
        for f in fields(Usage):
            value = data.get(f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                setattr(out, f.name, type(getattr(out, f.name))(value))
    return out


def adopt_child(run: RunServices, child_id: str, out: dict[str, Any]) -> None:
    """Record here what a child did on another machine: its nodes, steps and calls in the trace
    (and the cassette, so `rlm replay --rerun` serves them), its findings in the ledger and every
    node's usage (the run's budget is charged by the caller, whatever the outcome)."""
    trace = run.trace
    got = out.get("records")
    records: dict[str, Any] = got if isinstance(got, dict) else {}
    nodes = [n for n in records.get("nodes") or [] if isinstance(n, dict)]
    for node in nodes:
        # a NodeRecord as the worker's trace made it, with the worker that ran it
        trace.add_node({**node, "ran_on": str(out.get("ran_on") or "")})  # type: ignore[typeddict-item]
    for step in records.get("steps") or []:
        if isinstance(step, dict):
            trace.add_step(step)  # type: ignore[arg-type]  # a StepRecord as the worker's trace made it
    for call in records.get("bridge_calls") or []:
        trace.add_bridge_call(call)
    for call in records.get("subcalls") or []:
        trace.add_subcall(call)
    for event in records.get("provider_events") or []:
        trace.add_provider_event(event)
    for message in out.get("warnings") or []:
        trace.warn(f"{message} (on {out.get('ran_on')})")
    for call in out.get("cassette") or []:
        if isinstance(call, dict):
            trace.add_model_call(call)  # type: ignore[arg-type]
    for nid, used in (out.get("usage") or {}).items():
        run.usage_for(str(nid)).merge(usage_of(used))
    run.count_nodes_elsewhere(len(nodes))
    adopted = False
    for item in out.get("findings") or []:
        if not isinstance(item, dict):
            continue
        known = {f.name for f in fields(Finding)}
        finding = Finding(**{k: v for k, v in item.items() if k in known})
        adopted = run.ledger.adopt(replace(finding, text=str(finding.text))) is not None or adopted
    if adopted:
        trace.update(ledger=run.ledger.to_list())
