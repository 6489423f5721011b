"""The trace's shape, once, in code: `rlm-trace/1` as typed records and one validator.

The writer builds its document from these records (mypy checks every key it
writes) and every reader (replay, verify, rerun, logs) loads through
`rlm.trace.reader`, which validates with `problems()`. docs/trace-format.md
is checked against these definitions by tests/test_house.py: a field added
here and not documented there (or the reverse) fails the suite.

Within a major version fields are only added. Records are `total=False`
where a field may be absent in an older or unfinished trace; readers must
treat a missing field as absent and ignore fields they do not know.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Required, TypedDict, Union, get_args, get_origin

SCHEMA = "rlm-trace/1"

RunStatus = Literal[
    "running",
    "final",
    "forced",
    "partial",
    "budget",
    "provider_error",
    "no_answer",
    "interrupted",
    "error",
    "crashed",
    "withheld",
]
# Why a node's loop stopped (a node's `status` is "running" until then).
StopReason = Literal["final", "max_steps", "budget", "provider", "sandbox", "stuck", "interrupted"]
NodeStatus = Literal["running", "final", "max_steps", "budget", "provider", "sandbox", "stuck", "interrupted"]
AnswerSource = Literal["synthesis", "draft", "findings", "none"]
FindingKind = Literal["note", "result", "grep", "subcall", "final_draft", "memory"]
ProviderEventKind = Literal["retry", "waiting", "provider_failed"]
# How a recorded model call ended when it got no reply (rlm.model.client records it).
CallErrorKind = Literal["provider", "config", "budget"]


class ToolCallRecord(TypedDict):
    id: str | None
    name: str
    arguments: str  # the raw JSON text the model sent


class ReplyRecord(TypedDict, total=False):
    content: str
    tool_calls: list[ToolCallRecord]
    finish_reason: str | None


class MessageSummary(TypedDict):
    role: str
    tokens: int


class ModelCallRecord(TypedDict, total=False):
    messages: list[MessageSummary]
    dropped_turns: int
    context: dict[str, Any]  # the routed payload (rlm.run.routing): spec, focus, allotments, in and out
    prompt_tokens: int
    prompt_tokens_est: int
    completion_tokens: int
    cost: float | None
    latency_s: float
    deployment: str  # the deployment of a model_list group that answered (rlm.model.deployments)
    reply: ReplyRecord


class ActionRecord(TypedDict):
    name: str
    args: dict[str, Any]


class ObservationRecord(TypedDict):
    preview: str
    chars: int
    ok: bool


class StepRecord(TypedDict, total=False):
    node: Required[str]
    index: Required[int]
    model_call: ModelCallRecord
    action: ActionRecord | None
    parse_error: str | None
    observation: ObservationRecord
    told: str  # the run's notes after the observation: the table built meanwhile, a condition left out
    duration_s: float


class NodeRecord(TypedDict, total=False):
    id: Required[str]
    parent: str | None
    parent_step: int | None
    depth: int
    question: str
    slice: dict[str, int] | None
    model: str
    protocol: str
    observation_chars: int
    status: NodeStatus
    steps: int
    usage: dict[str, Any]
    answer: str
    answer_source: AnswerSource
    synthesis_payload: dict[str, Any]  # a child's synthesis context (the root's is in `synthesis`)
    ran_on: str  # host:pid of the cluster worker that investigated it (--executor dask://)
    traceback: str  # a bug that ended it on the cluster worker (the run's own is the trace's)
    query_hint: dict[str, str] | None  # traces of earlier versions: a query built from the question's words


class SubcallRecord(TypedDict, total=False):
    node: str
    step: int
    question: str
    slice: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    latency_s: float
    deployment: str
    ran_on: str  # the cluster worker (host:pid) that made the call, under --executor dask://
    batch: str  # the provider's batch job it was a request of, under --batch
    answer: str
    cached: bool
    context: dict[str, Any]


class BatchRecord(TypedDict, total=False):
    """One job of a provider's Batch API a fan-out sent its sub-calls as (--batch, rlm.run.batch)."""

    id: str
    node: str
    step: int
    where: str  # the endpoint without credentials, else the provider
    model: str
    input_file_id: str
    sha256: str  # of the request file: a resumed run's same requests find the job by it
    requests: int
    submitted_at: str
    resumed_from: str  # the run that submitted the job, when this run took it up (--resume)
    status: str
    completed: int
    failed: int
    waited_s: float


class ResumeRecord(TypedDict, total=False):
    """What `--resume RUN_ID` offered this run: that run's jobs, each taken up at most once."""

    run_id: str
    batches: list[BatchRecord]


class BridgeCallRecord(TypedDict, total=False):
    node: str
    step: int
    name: str
    args: dict[str, Any]
    result: str | list[str]
    error: str


class ProviderEventRecord(TypedDict, total=False):
    kind: ProviderEventKind
    at_s: float
    model: str
    where: str
    attempt: int
    attempts: int
    error: str
    wait_s: float
    retry_after: float | None
    waited_s: float
    limit_s: float
    message: str


class FindingRecord(TypedDict, total=False):
    id: str
    kind: FindingKind
    text: str
    full: str | None
    evidence: str
    node: str
    topic: str | None
    superseded_by: str | None


class SynthesisRecord(TypedDict, total=False):
    source: AnswerSource
    error: str | None
    reply: ReplyRecord | None
    prompt_tokens: int | None
    prompt_tokens_est: int | None
    answer: str | None
    explanation: str | None
    citations: list[str]
    unknown_citations: list[str]  # the ids themselves (the top level counts them)
    payload: dict[str, Any] | None
    confidence: str | None  # as checked against the grounding (low when a value is in no finding shown)
    confidence_reason: str
    first_attempt: dict[str, Any] | None
    stated_confidence: str | None  # as the reply gave it
    doubts: list[str]  # conditions the question names that the query behind the answer left out
    grounded: bool | None  # rlm.run.grounding
    supporting: list[str]
    missing: list[str]


class PlainRecord(TypedDict, total=False):
    """The one call of a plain run (rlm.run.plain): what of the input it was shown, and its reply."""

    window: int
    reply_tokens: int
    lines: int
    shown_lines: int
    cut: bool
    excerpt_tokens: int
    prompt_tokens_est: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    latency_s: float
    reply: ReplyRecord
    answer: str | None
    explanation: str
    grounded: bool | None
    supporting: list[str]
    missing: list[str]
    error: str | None
    overflows: list[str]


class CassetteClientRecord(TypedDict, total=False):
    model: str
    where: str
    context_window: int
    tools: bool
    small: bool
    priced: bool
    measures_usage: bool


class CassetteCallRecord(TypedDict, total=False):
    role: Required[str]
    key: Required[str]
    reply: ReplyRecord
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    deployment: str
    batch: str
    error: str
    error_kind: CallErrorKind
    limit: str
    stopped: bool
    gave_up: bool


class CassetteRecord(TypedDict, total=False):
    clients: dict[str, CassetteClientRecord]
    calls: list[CassetteCallRecord]


class TraceDoc(TypedDict, total=False):
    schema: Required[str]
    tool_version: str
    run_id: str
    started_at: str
    finished_at: str | None
    status: RunStatus
    exit_code: int | None
    pid: int
    settings: dict[str, Any]
    models: dict[str, str]
    deployments: list[
        dict[str, Any]
    ]  # a model_list group's deployments: id, group, model, api_base, rpm, tpm
    input: dict[str, Any]
    question: str | None
    mode: str  # how the run answered: rlm (the investigation) or plain (one direct call)
    sandbox: dict[str, Any]
    table_build: dict[str, Any]  # a table built while the run went (rlm.input.tablejob): background, seconds
    line_index: dict[str, Any]  # a line index made while the run went (rlm.input.glance): background, seconds
    warnings: list[str]
    nodes: list[NodeRecord]
    steps: list[StepRecord]
    subcalls: list[SubcallRecord]
    batches: list[BatchRecord]
    resume: ResumeRecord
    bridge_calls: list[BridgeCallRecord]
    provider_events: list[ProviderEventRecord]
    ledger: list[FindingRecord]
    synthesis: SynthesisRecord | None
    plain: PlainRecord
    citations: dict[str, dict[str, int]]
    unknown_citations: int
    answer: str | None
    message: str
    stop: str
    error: str
    traceback: str
    totals: dict[str, Any]
    memory: dict[str, Any]
    cassette: CassetteRecord


# The records a reader may meet, by the name docs/trace-format.md gives them.
RECORDS: dict[str, type] = {
    "trace": TraceDoc,
    "node": NodeRecord,
    "step": StepRecord,
    "model_call": ModelCallRecord,
    "subcall": SubcallRecord,
    "batch": BatchRecord,
    "resume": ResumeRecord,
    "bridge call": BridgeCallRecord,
    "provider event": ProviderEventRecord,
    "finding": FindingRecord,
    "synthesis": SynthesisRecord,
    "plain": PlainRecord,
    "cassette": CassetteRecord,
    "cassette client": CassetteClientRecord,
    "cassette call": CassetteCallRecord,
}


def new_trace(run_id: str, tool_version: str, started_at: str, pid: int) -> TraceDoc:
    """The document a run starts with: every list empty, nothing finished."""
    return {
        "schema": SCHEMA,
        "tool_version": tool_version,
        "run_id": run_id,
        "started_at": started_at,
        "finished_at": None,
        "status": "running",
        "exit_code": None,
        "pid": pid,
        "settings": {},
        "input": {},
        "question": None,
        "sandbox": {},
        "warnings": [],
        "nodes": [],
        "steps": [],
        "subcalls": [],
        "bridge_calls": [],
        "provider_events": [],
        "ledger": [],
        "synthesis": None,
        "answer": None,
        "totals": {},
    }


# -- validation -------------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(record: type) -> dict[str, Any]:
    if record not in _HINTS:
        _HINTS[record] = typing.get_type_hints(record)
    return _HINTS[record]


def _required(record: type) -> list[str]:
    """The fields marked Required[...] (read from the annotations: with postponed evaluation
    the class's own __required_keys__ cannot see them)."""
    hints = typing.get_type_hints(record, include_extras=True)
    return [name for name, kind in hints.items() if get_origin(kind) is Required]


def _is_record(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__annotations__")


def _matches(value: Any, kind: Any, strict: bool) -> bool:
    """Whether a JSON value has the JSON shape of `kind`. Literal values are checked as their
    type unless `strict`: a newer minor version may add statuses, and readers must not reject
    them; what this version writes must use the values it declares."""
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        return any(_matches(value, k, strict) for k in get_args(kind))
    if origin is Literal:
        if strict:
            return value in get_args(kind)
        return any(isinstance(value, type(v)) for v in get_args(kind))
    if origin is list:
        (item,) = get_args(kind)
        return isinstance(value, list) and all(_matches(v, item, strict) for v in value)
    if origin is dict:
        _, item = get_args(kind)
        return isinstance(value, dict) and all(_matches(v, item, strict) for v in value.values())
    if _is_record(kind):
        return isinstance(value, dict)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _records_in(kind: Any) -> list[type]:
    """The record types a field's value may hold (for descending into it)."""
    if _is_record(kind):
        return [kind]
    found: list[type] = []
    for arg in get_args(kind):
        found.extend(_records_in(arg))
    return found


def problems(value: Any, record: type = TraceDoc, where: str = "trace", *, strict: bool = False) -> list[str]:
    """Every field of `value` whose JSON shape does not match `record`, as "where.field: why" lines.

    `strict` also requires Literal fields (statuses, kinds) to hold a declared value:
    what the tests demand of every trace this version writes.

    Unknown fields are ignored (later versions add fields); a missing field is
    absent, not wrong, except the few a record cannot be read without.
    """
    if not isinstance(value, dict):
        return [f"{where} is not an object"]
    found = [f"{where} has no {name!r}" for name in _required(record) if name not in value]
    for name, kind in _hints(record).items():
        if name not in value:
            continue
        field = value[name]
        if not _matches(field, kind, strict):
            found.append(f"{where}.{name} is not {_describe(kind, strict)}: {field!r:.80}")
            continue
        for inner in _records_in(kind):
            if isinstance(field, dict):
                found.extend(problems(field, inner, f"{where}.{name}", strict=strict))
            elif isinstance(field, list):
                for i, item in enumerate(field):
                    found.extend(problems(item, inner, f"{where}.{name}[{i}]", strict=strict))
    return found


def _describe(kind: Any, strict: bool = False) -> str:
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(k, strict) for k in get_args(kind))
    if origin is Literal:
        return "one of " + ", ".join(map(str, get_args(kind))) if strict else "a string"
    if origin is list:
        return "a list"
    if origin is dict or _is_record(kind):
        return "an object"
    if kind is type(None):
        return "null"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(kind, str(kind))
