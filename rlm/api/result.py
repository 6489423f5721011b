"""What one run established, as a program reads it: the fields `rlm ask --json` prints, typed.

Built from the engine's result (`rlm.run.engine.RunResult`) once the run is over; plain data
(strings, numbers, lists of dataclasses), so a result can be kept, compared or turned back into
the JSON document (`Result.to_dict`) after the run and its files are gone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Mode = Literal["rlm", "plain"]


@dataclass(frozen=True)
class Finding:
    """One entry of the run's ledger: an established fact and where it came from."""

    id: str
    kind: str  # note | result | grep | subcall | final_draft | memory
    text: str
    evidence: str
    node: str


@dataclass(frozen=True)
class Citation:
    """A finding the answer cites, its text whole (as `--json`'s `citations`)."""

    id: str
    text: str
    evidence: str


@dataclass(frozen=True)
class Usage:
    """What the run spent. `cost_usd` is None when any call's price is unknown (never a partial sum)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    failed_requests: int = 0

    @classmethod
    def of(cls, usage: dict[str, Any]) -> Usage:
        known = {k: usage[k] for k in cls.__dataclass_fields__ if k in usage}
        return cls(**known)


@dataclass(frozen=True)
class Result:
    """The outcome of `rlm.ask`: the answer and how it was established.

    `answer` is the value alone, in the form the question asks for (None when the run established
    none: then `ask` raised instead of returning, and this result is the exception's `.result`).
    `status` is `final`, `forced` or `partial` for a returned result (exit code 0), else
    `no_answer`, `withheld`, `budget` or `provider_error`. `grounded` says whether every value of
    the answer is held by a finding the synthesis was shown (`supporting` names them); `doubts`
    names the conditions the question states that the query behind the answer left out; `trace` is
    the absolute path of the run's trace (None with `trace=False`), `run_id` its name.
    """

    answer: str | None
    explanation: str
    citations: list[Citation]
    confidence: str | None  # high | medium | low
    grounded: bool | None
    supporting: list[str]
    # Conditions the question names that the query behind the answer left out (then its
    # confidence is low, and strict=True withholds it).
    doubts: list[str]
    status: str
    exit_code: int
    message: str
    question: str
    findings: list[Finding]
    usage: Usage
    steps: int
    elapsed_s: float
    largest_prompt_tokens: int
    trace: str | None
    run_id: str | None
    mode: Mode
    # A plain run's view of the input: lines, shown_lines, cut and the note (None for rlm mode).
    plain: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the run answered (exit code 0)."""
        return self.exit_code == 0

    @property
    def cost(self) -> float | None:
        """Dollars spent, where every call was priced."""
        return self.usage.cost_usd

    def to_dict(self) -> dict[str, Any]:
        """The document `rlm ask --json` prints for the same run, `run_id` added."""
        d = asdict(self)
        d["elapsed_s"] = round(self.elapsed_s, 3)
        if self.mode == "rlm":
            d.pop("plain")
        return d


def result_of(run: Any, question: str, warnings: list[str]) -> Result:
    """The typed result of an engine's `RunResult` (or a plain run's `PlainResult`)."""
    from rlm.run.plain import PlainResult

    by_id = {f.id: f for f in run.findings}
    trace = str(Path(run.trace_path).resolve()) if run.trace_path else None
    excerpt = getattr(run, "excerpt", None)
    return Result(
        answer=run.answer,
        explanation=run.explanation,
        citations=[
            Citation(fid, by_id[fid].full or by_id[fid].text, by_id[fid].evidence)
            for fid in run.citations
            if fid in by_id
        ],
        confidence=run.confidence,
        grounded=run.grounded,
        supporting=list(run.supporting),
        doubts=list(getattr(run, "doubts", None) or []),
        status=run.status,
        exit_code=run.exit_code,
        message=run.message,
        question=question,
        findings=[Finding(f.id, f.kind, f.text, f.evidence, f.node) for f in run.findings],
        usage=Usage.of(run.usage),
        steps=run.steps,
        elapsed_s=run.elapsed_s,
        largest_prompt_tokens=run.largest_prompt,
        trace=trace,
        run_id=Path(trace).stem if trace else None,
        mode="plain" if isinstance(run, PlainResult) else "rlm",
        plain=excerpt.to_dict() if excerpt is not None else None,
        warnings=list(warnings),
    )
