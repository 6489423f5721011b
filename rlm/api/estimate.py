"""`rlm.estimate`: the most a run could spend under its limits, without running it.

The budget (rlm.model.budget) admits every call before it is made: a run never makes more than
`max_calls` calls nor spends more than `max_tokens` tokens, and where the model's price is known
it never spends more than `max_cost`. So the worst case is the limits themselves, priced the
dearest way they can be spent: every reply as long as `reply_max_tokens` allows (completion
tokens cost more than prompt tokens at every provider litellm prices), the rest prompt. No model
is called and the input is not read, only looked at: the estimate is for before a batch runs.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from typing import Any

from rlm.api.ask import Source, input_of, settings_for
from rlm.errors import InputError


@dataclass(frozen=True)
class Estimate:
    """The bounds of one run. `max_cost_usd` is None where a model's price is unknown (then
    `--max-cost` cannot hold either: it is checked against prices)."""

    model: str
    sub_model: str
    mode: str
    max_calls: int
    max_tokens: int
    max_prompt_tokens: int
    max_completion_tokens: int
    max_cost_usd: float | None
    max_time_s: float | None
    input: str
    input_bytes: int | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """The estimate as `rlm ask --estimate` prints it."""
        size = f"{self.input_bytes:,} bytes" if self.input_bytes is not None else "size unknown"
        models = self.model if self.sub_model == self.model else f"{self.model} (sub-calls: {self.sub_model})"
        cost = (
            f"${self.max_cost_usd:.4f}"
            if self.max_cost_usd is not None
            else "unknown (no price for the model)"
        )
        lines = [
            f"input:        {self.input} ({size})",
            f"model:        {models}, mode {self.mode}",
            f"model calls:  at most {self.max_calls:,}",
            f"tokens:       at most {self.max_tokens:,} (prompt at most {self.max_prompt_tokens:,}, "
            f"completion at most {self.max_completion_tokens:,})",
            f"cost:         at most {cost}",
            "time:         "
            + (f"at most {self.max_time_s:g} s" if self.max_time_s is not None else "no limit"),
            *(f"note:         {n}" for n in self.notes),
        ]
        return "\n".join(lines)


def estimate(
    source: Source,
    question: str,
    *,
    model: str | None = None,
    sub_model: str | None = None,
    **settings: Any,
) -> Estimate:
    """The most `ask(source, question, ...)` could spend with the same arguments: calls, tokens,
    dollars (where litellm prices the models) and time. Raises as `ask` does for a missing input
    (InputError), no model configured (ConfigError) or a bad setting (UsageError)."""
    from rlm.errors import UsageError
    from rlm.run.wiring import LOCAL, resolve_model_name

    if not question.strip():
        raise UsageError("the question is empty")
    resolved = settings_for(model, sub_model, settings)
    input_arg, stream = input_of(source)
    shown, size = _input_size(input_arg, stream)
    root = resolve_model_name(resolved)
    sub = resolved.sub_model or root
    notes: list[str] = []
    if resolved.mode == "plain":
        calls = 1
        notes.append("mode plain: one model call")
    else:
        calls = resolved.max_calls
        if resolved.mode == "auto":
            notes.append("mode auto: the bound of an investigation (a plain call spends less)")
    tokens = resolved.max_tokens
    completion = min(tokens, calls * resolved.reply_max_tokens)
    cost = _dearest(resolved, {root, sub}, tokens, completion, notes)
    if cost is not None and resolved.max_cost is not None and resolved.max_cost < cost:
        cost = resolved.max_cost
        notes.append(f"the cost is capped by --max-cost ${resolved.max_cost:g}")
    if LOCAL in (root, sub):
        notes.append("the offline model costs no dollars")
    return Estimate(
        model=root,
        sub_model=sub,
        mode=resolved.mode,
        max_calls=calls,
        max_tokens=tokens,
        max_prompt_tokens=tokens,
        max_completion_tokens=completion,
        max_cost_usd=None if cost is None else round(cost, 6),
        max_time_s=resolved.max_time,
        input=shown,
        input_bytes=size,
        notes=notes,
    )


def _input_size(input_arg: str, stream: Any) -> tuple[str, int | None]:
    """The input as it is named, and its size, checked as readable without reading it."""
    if stream is not None:
        try:
            st = os.fstat(stream.fileno())
        except (AttributeError, OSError, ValueError):
            return "<stream>", None
        # A pipe's size is what is buffered in it now, not what will come.
        return "<stream>", st.st_size if stat.S_ISREG(st.st_mode) else None
    if "://" in input_arg:
        from rlm.input.remote import is_remote, shown

        if is_remote(input_arg):  # looked at only: its size is learnt when the run lists it
            return shown(input_arg), None
    if not os.path.exists(input_arg):
        raise InputError(f"file not found: {input_arg}")
    if os.path.isdir(input_arg):
        raise InputError(f"{input_arg} is a directory, not a file")
    if not os.access(input_arg, os.R_OK):
        raise InputError(f"permission denied: {input_arg}")
    return input_arg, os.path.getsize(input_arg)


def _dearest(settings: Any, models: set[str], tokens: int, completion: int, notes: list[str]) -> float | None:
    """The dearest way `tokens` tokens (at most `completion` of them written) can be spent on the
    dearest of `models`; None when one of them has no known price."""
    from rlm.model.client import ModelClient
    from rlm.run.wiring import LOCAL

    worst = 0.0
    for name in sorted(models):
        if name == LOCAL:
            continue
        client = ModelClient(name, api_base=settings.api_base, api_key=settings.api_key)
        bounds = [client.cost_bound(tokens - completion, completion), client.cost_bound(tokens, 0)]
        if any(b is None for b in bounds):
            notes.append(f"litellm has no price for {name}")
            return None
        worst = max(worst, *(b for b in bounds if b is not None))
    return worst
