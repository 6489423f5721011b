"""Forced synthesis: the answer is always written here, from the ledger.

Whatever the loop produced (a final draft, nothing, an error, a budget stop),
one more model call without tools turns the question and the findings into
the answer. If that call fails, the draft or the findings themselves are the
(partial) answer; if nothing is known at all, there is no answer.

The call is admitted by the budget like any other: a child's synthesis is an
ordinary call (refused once a limit is reached: its draft or findings stand
in), the root's uses the call, tokens and the end of --max-time held back for
it. A provider the run has already given up on is not asked again.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm import prompts
from rlm.budget import Budget, BudgetExceeded
from rlm.errors import RlmError
from rlm.ledger import Finding
from rlm.model import ModelClient, Reply

DIGEST_CHARS = 6000


@dataclass
class Synthesis:
    answer: str | None
    source: str  # synthesis | draft | findings | none
    reply: Reply | None = None
    error: str | None = None
    prompt_tokens_est: int = 0


def _fallback(draft: str | None, findings: list[Finding], error: str | None) -> Synthesis:
    if draft and draft.strip():
        return Synthesis(draft.strip(), "draft", error=error)
    useful = [f for f in findings if f.kind != "final_draft"]
    if useful:
        text = "Established so far:\n" + "\n".join(f"- {f.text} [{f.id}]" for f in useful[-12:])
        return Synthesis(text, "findings", error=error)
    return Synthesis(None, "none", error=error)


def _usable(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.lower().startswith(("[error", "error:"))


def synthesize(
    model: ModelClient,
    question: str,
    findings: list[Finding],
    digest: str,
    draft: str | None,
    *,
    stop_note: str | None,
    max_tokens: int,
    cite: bool = True,
    budget: Budget | None = None,
    final: bool = False,
) -> Synthesis:
    """One call with no tools; never raises for provider trouble."""
    if not findings and not draft:
        return Synthesis(None, "none")
    messages = [
        {"role": "system", "content": prompts.synthesis_system(cite)},
        {"role": "user", "content": prompts.synthesis_prompt(question, digest, draft, stop_note)},
    ]
    est = model.estimate_prompt_tokens(messages)
    try:
        if budget is not None:
            if final:
                budget.admit_answer(est)
            else:
                budget.admit(est)
        reply = model.complete(messages, tools=None, max_tokens=max_tokens, final=final)
    except RlmError as exc:
        result = _fallback(draft, findings, exc.message)
        result.prompt_tokens_est = est
        return result
    except BudgetExceeded as exc:
        result = _fallback(draft, findings, exc.detail)
        result.prompt_tokens_est = est
        return result
    if _usable(reply.content):
        return Synthesis(reply.content.strip(), "synthesis", reply=reply, prompt_tokens_est=est)
    result = _fallback(draft, findings, "the synthesis reply was empty")
    result.reply, result.prompt_tokens_est = reply, est
    return result
