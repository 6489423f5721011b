"""Plain mode: one direct model call that answers from the input's own text.

The baseline an investigation is measured against, and the cheaper way for an input small
enough to read whole. The call is shown as much of the input as fits the model's window,
from line 1, whole lines only; when the input is cut there, the prompt, stderr, --json and
the trace say so in the same words ("lines 1-N of M shown; the rest was cut"). The call goes
through the run's model client, budget (it is the run's answer: `admit_answer`), trace and
result, as an investigation's synthesis does; its answer is grounded in the text shown.

`--mode auto` takes plain when the whole input fits in half the model's window
(`chooses_plain`), and the investigation otherwise.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, cast

from rlm.errors import ExitCode, ProviderError
from rlm.input.source import Profile
from rlm.model.budget import BudgetExceeded
from rlm.model.client import ModelClient, Reply
from rlm.model.tokens import count_text
from rlm.run.answer_kind import as_asked, wrong_kinds
from rlm.run.doubts import kind_doubt
from rlm.run.engine import RunResult, budget_for
from rlm.run.events import Phase, Progress, RunWarning, no_progress
from rlm.run.framing import frame, unframe
from rlm.run.grounding import ground
from rlm.run.ledger import Ledger
from rlm.run.prompts import DATA_RULE
from rlm.run.settings import Settings, sizing_for
from rlm.run.synthesis import parse_answer
from rlm.text.textfile import MappedText
from rlm.trace.schema import PlainRecord, ReplyRecord, RunStatus
from rlm.trace.writer import TraceWriter

# The id under which the text shown grounds an answer (`supporting`): it is no finding.
SHOWN = "input"
# Room kept free of the window: the count is cl100k's, and another model's tokenizer may
# need a few percent more for the same text.
MARGIN_SHARE = 20  # 1/20 of the window
# A line longer than this many bytes per token of room cannot fit (cl100k averages about 4
# bytes a token on text and logs): reading stops there without decoding the rest of it,
# so a gigabyte-long line costs what fits, not its size.
BYTES_PER_TOKEN_MAX = 32
_FENCE = re.compile(r"^```[\w+-]*[ \t]*\n(.*?)\n?```$", re.S)
_LEAD_IN = re.compile(r"^(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:\-]\s*", re.I)

SYSTEM = (
    "You answer a question about a file from its text, which is shown to you. "
    + DATA_RULE
    + " Reply with the answer alone, in the form the question asks for: a number, a name, yes or no, "
    "or a list with one item a line. No explanation, no code, no quotes around it."
)


@dataclass(frozen=True)
class Excerpt:
    """The input's first lines that fit a number of tokens, whole, as the model is shown them."""

    text: str
    shown_lines: int
    lines: int  # the input's
    tokens: int  # the shown lines' estimate, a newline each

    @property
    def cut(self) -> bool:
        return self.shown_lines < self.lines

    def note(self) -> str:
        """What the prompt, stderr and --json say of how much was shown."""
        if self.cut:
            return f"lines 1-{self.shown_lines:,} of {self.lines:,} shown; the rest was cut"
        return f"all {self.lines:,} lines shown"

    def to_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "shown_lines": self.shown_lines, "cut": self.cut, "note": self.note()}


@dataclass
class PlainResult(RunResult):
    """A plain run's result: the engine's fields, and what of the input its call was shown."""

    excerpt: Excerpt | None = None


def read_excerpt(profile: Profile, budget: int) -> Excerpt:
    """Lines from line 1 while their tokens fit `budget`, each whole or not at all."""
    profile = profile.with_index()  # a big file's index, still being made: waited for
    kept: list[str] = []
    used = 0
    with MappedText(profile.work_path or profile.path, index_path=profile.index_path) as text:
        for i in range(text.n_lines):
            room = budget - used
            cap = room * BYTES_PER_TOKEN_MAX
            if room <= 0:
                break
            line = text.line_head(i, cap)
            # line_head cuts at `cap` bytes (less at most a character): a line that long is longer
            # than any that could fit. Invalid bytes decode to U+FFFD, so the length only grows.
            if len(line.encode("utf-8", "surrogatepass")) >= cap - 3:
                break
            line = text.display(line)
            cost = count_text(line) + 1
            if cost > room:
                break
            kept.append(line)
            used += cost
    return Excerpt("\n".join(kept), len(kept), profile.lines, used)


def chooses_plain(mode: str, profile: Profile, model: ModelClient) -> bool:
    """Whether the run is a plain call: `plain`, or `auto` with the whole input in half the window."""
    if mode != "auto":
        return mode == "plain"
    half = model.context_window() // 2
    if profile.index_job is not None and profile.size > half * BYTES_PER_TOKEN_MAX:
        return False  # more bytes than the most the half window could hold: its index is not waited for
    return not read_excerpt(profile, half).cut


def messages_for(question: str, profile: Profile, excerpt: Excerpt) -> list[dict[str, Any]]:
    """The call's prompt: the instructions, the file's text framed as data, then the question."""
    where = f"File: {profile.display_name} ({excerpt.note()})"
    if excerpt.cut:
        where += ". Answer from the lines shown."
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{where}\n{frame(excerpt.text)}\n\nQuestion: {question}"},
    ]


# A prompt the model found over its window is shown again, cut further, this many times in all.
OVERFLOW_RETRIES = 3
# The model's words for a prompt over its window, with its own counts where it gives them:
# llama.cpp's server ("request (5242 tokens) exceeds the available context size (4096 tokens)"),
# OpenAI's ("maximum context length is 8192 tokens. However, your messages resulted in 9001").
_OVER_COUNTED = (
    re.compile(r"\((?P<asked>\d+) tokens\) exceeds the available context size \((?P<room>\d+) tokens"),
    re.compile(r"maximum context length is (?P<room>\d+) tokens.*?resulted in (?P<asked>\d+) tokens", re.S),
)
_OVER = re.compile(r"context (?:size|length|window)", re.I)


@dataclass(frozen=True)
class _Overflow:
    """The model's word that the prompt is over its window, and the share of the room to keep."""

    message: str
    share: float
    detail: str


def overflow_share(message: str, est: int) -> tuple[float, str] | None:
    """When `message` says the prompt of about `est` tokens (cl100k) was over the model's window:
    the share of the room to fill next time (the estimate over the model's own count, a little
    less), and the counts in words; None for any other failure."""
    for pattern in _OVER_COUNTED:
        found = pattern.search(message)
        if found:
            asked, room = int(found["asked"]), int(found["room"])
            if asked > 0:
                share = min(0.9, 0.95 * est / asked)
                return share, f"{asked:,} tokens where {room:,} fit ({est:,} estimated)"
    if _OVER.search(message) and re.search(r"exceed|too long|maximum", message, re.I):
        return 0.7, "the prompt over its window"
    return None


def answer_of(content: str) -> tuple[str, str]:
    """(the answer, what the reply said after it) from a reply: an "Answer:" lead-in dropped, a
    fenced block's body, the first paragraph as the value (rlm.run.synthesis.parse_answer)."""
    text = _LEAD_IN.sub("", unframe(content).strip()).strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    answer, explanation, _ = parse_answer(text)
    return answer.strip(), explanation


class PlainRun:
    """One plain run: the excerpt, the call and its result, recorded in the run's trace.

    It offers wiring what an `Engine` does (the budget, the ledger, the counts the trace's
    totals read, `run` and `close`), so a run's opening and closing is one code path."""

    def __init__(
        self,
        settings: Settings,
        *,
        profile: Profile,
        question: str,
        model: ModelClient,
        trace: TraceWriter,
        progress: Progress | None = None,
    ) -> None:
        self.settings = settings
        self.profile = profile
        self.question = question
        self.model = model
        self.trace = trace
        self.progress: Progress = progress or no_progress
        # The run's limits as an investigation has them; the one call is its answer.
        self.budget = budget_for(settings)
        self.ledger = Ledger()  # no findings: the evidence is the text shown
        self.steps_total = 0
        self.nodes_started = 0
        self.restarts = 0
        self.largest_prompt = 0
        self.record: PlainRecord = {}

    def _excerpt(
        self, window: int, reply_tokens: int, scale: float = 1.0
    ) -> tuple[Excerpt, list[dict[str, Any]]]:
        """The most of the input that fits beside the instructions, the question and the reply;
        `scale`: the share of the room to fill, below 1 once the model counted more tokens than
        the estimate (its tokenizer is not cl100k)."""
        limit = int((window - reply_tokens - window // MARGIN_SHARE) * scale)
        frame_only = Excerpt("", 0, max(1, self.profile.lines), 0)  # the cut note's words counted
        fixed = self.model.estimate_prompt_tokens(messages_for(self.question, self.profile, frame_only))
        budget = limit - fixed
        for _ in range(4):  # the lines' sum is an estimate of the whole: checked, and cut further
            excerpt = read_excerpt(self.profile, max(0, budget))
            messages = messages_for(self.question, self.profile, excerpt)
            over = self.model.estimate_prompt_tokens(messages) - limit
            if over <= 0:
                break
            budget -= over
        return excerpt, messages

    def _update(self, **fields: Any) -> None:
        self.record = cast(PlainRecord, {**self.record, **fields})
        self.trace.update(plain=self.record)

    def run(self) -> PlainResult:
        started = time.monotonic()
        window = self.model.context_window()
        reply_tokens = sizing_for(self.settings, window).reply_tokens
        self.progress(Phase("reading what fits the window"))
        scale = 1.0
        for attempt in range(OVERFLOW_RETRIES):
            excerpt, messages = self._excerpt(window, reply_tokens, scale)
            outcome = self._ask(excerpt, messages, window, reply_tokens, started)
            if not isinstance(outcome, _Overflow):
                return outcome
            if attempt == OVERFLOW_RETRIES - 1:
                break  # refused each time: the last refusal is the run's error (_ask recorded it)
            # The model's own count of the prompt was over its window: shown again, cut to the
            # share its count leaves room for (a tokenizer that splits digits one by one needs
            # half as many tokens again as cl100k on a log). Recorded as a refusal answered by
            # showing less, not as the run's error.
            scale *= outcome.share
            self._update(error=None, overflows=[*self.record.get("overflows", []), outcome.message])
            note = f"plain mode: the model counted {outcome.detail}; shown again with fewer lines"
            self.trace.warn(note)
            self.progress(RunWarning(note))
        return self._result(None, "provider_error", ExitCode.PROVIDER, outcome.message, excerpt, started)

    def _ask(
        self,
        excerpt: Excerpt,
        messages: list[dict[str, Any]],
        window: int,
        reply_tokens: int,
        started: float,
    ) -> PlainResult | _Overflow:
        """One plain call over `excerpt`: its result, or the model's word that the prompt is over
        its window."""
        est = self.model.estimate_prompt_tokens(messages)
        self.largest_prompt = est
        self._update(
            window=window,
            reply_tokens=reply_tokens,
            lines=excerpt.lines,
            shown_lines=excerpt.shown_lines,
            cut=excerpt.cut,
            excerpt_tokens=excerpt.tokens,
            prompt_tokens_est=est,
        )
        if excerpt.cut:
            note = f"plain mode: {excerpt.note()}"
            self.trace.warn(note)
            self.progress(RunWarning(note))
        if excerpt.cut and excerpt.shown_lines == 0:
            why = (
                f"line 1 of {self.profile.display_name} alone does not fit the model's window: plain mode "
                "has nothing to show it, and no call was made (--mode rlm reads it)"
            )
            return self._result(None, "no_answer", ExitCode.NO_ANSWER, why, excerpt, started)
        self.progress(Phase("waiting for the model (plain)"))
        try:
            self.budget.admit_answer(est)
            reply = self.model.complete(messages, tools=None, max_tokens=reply_tokens, final=True)
        except ProviderError as exc:
            self.budget.abandon()
            self._update(error=exc.message)
            over = overflow_share(exc.message, est)
            if over is not None and excerpt.shown_lines > 1:
                return _Overflow(exc.message, *over)
            return self._result(None, "provider_error", ExitCode.PROVIDER, exc.message, excerpt, started)
        except BudgetExceeded as exc:
            self.budget.abandon()
            self._update(error=exc.detail)
            message = f"{exc.detail}; nothing was established before it"
            return self._result(None, "budget", ExitCode.BUDGET, message, excerpt, started)
        return self._answered(reply, excerpt, started)

    def _answered(self, reply: Reply, excerpt: Excerpt, started: float) -> PlainResult:
        self.budget.charge(reply.prompt_tokens, reply.completion_tokens, reply.cost)
        self.largest_prompt = max(self.largest_prompt, reply.prompt_tokens)
        answer, explanation = answer_of(reply.content)
        grounding = ground(answer, {SHOWN: excerpt.text}, self.question) if answer else None
        formed = as_asked(self.question, answer)  # after the grounding, of what the model wrote
        if formed is not None:
            self.trace.warn(formed.note)
            self.progress(RunWarning(formed.note))
            answer = formed.answer
        self._update(
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            cost=reply.cost,
            latency_s=round(reply.latency_s, 4),
            reply=cast(ReplyRecord, reply.to_dict()),
            answer=answer or None,
            explanation=explanation,
            **(grounding.to_dict() if grounding else {"grounded": None, "supporting": [], "missing": []}),
        )
        if not answer:
            why = "no answer could be established (the model's reply was empty)"
            return self._result(None, "no_answer", ExitCode.NO_ANSWER, why, excerpt, started)
        result = self._result(answer, "final", ExitCode.OK, "answered", excerpt, started)
        result.explanation = explanation
        # An answer of another kind than asked is in doubt, as the loop's is: --strict withholds it.
        result.doubts = [kind_doubt(note) for note in wrong_kinds(self.question, answer)]
        if grounding is not None:
            result.grounded, result.supporting = grounding.grounded, grounding.supporting
        return result

    def _result(
        self,
        answer: str | None,
        status: RunStatus,
        code: int,
        message: str,
        excerpt: Excerpt,
        started: float,
    ) -> PlainResult:
        return PlainResult(
            answer=answer,
            status=status,
            exit_code=int(code),
            message=message,
            usage=self.budget.usage.to_dict(),
            elapsed_s=time.monotonic() - started,
            trace_path=str(self.trace.path) if self.trace.path else None,
            largest_prompt=self.largest_prompt,
            excerpt=excerpt,
        )

    def close(self) -> None:
        """Nothing to stop: a plain run starts no worker and no thread of its own."""
