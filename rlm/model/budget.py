"""One budget for the whole tree of nodes: calls, tokens, dollars, wall time.

Calls are admitted before they are made, so a limit stops the run before it
is crossed. A fan-out reserves room for all of its calls first, so parallel
children cannot overspend between them. One synthesis call is always held
back: the run can always write its answer.

Time is wall-clock time from the start of the run. The loop ends a little
before `max_time` (`answer_reserve_s`, at least 1 s and at most 10 s) so the
answer can be written from what is known before the limit; every model call
is bounded by the time left (rlm/model/client.py), so the limit holds even when a
provider hangs or drips its reply. Cost is checked against what the next call
may cost at most (its prompt plus its whole reply allowance), not against
what was spent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


class BudgetExceeded(Exception):
    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit
        self.detail = detail


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0
    failed_requests: int = 0  # requests that got no usable reply (retried or not): not calls

    def add(self, prompt_tokens: int, completion_tokens: int, cost: float | None) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if cost is None:
            self.unpriced_calls += 1
        else:
            self.cost += cost

    def merge(self, other: Usage) -> None:
        """Add what `other` counted (another budget's usage: a child's on another machine)."""
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost += other.cost
        self.unpriced_calls += other.unpriced_calls
        self.failed_requests += other.failed_requests

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            # Unknown prices stay unknown: a sum that leaves calls out would understate the cost.
            "cost_usd": None if self.unpriced_calls else round(self.cost, 6),
            "failed_requests": self.failed_requests,
        }


@dataclass
class Reservation:
    calls: int
    tokens: int


class Budget:
    def __init__(
        self,
        *,
        max_calls: int,
        max_tokens: int,
        max_cost: float | None = None,
        max_time: float | None = None,
        synthesis_tokens: int = 6000,
        started: float | None = None,
    ) -> None:
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.max_time = max_time
        self.synthesis_tokens = synthesis_tokens
        self.started = time.monotonic() if started is None else started
        self.answer_reserve_s = answer_reserve(max_time)
        # What the root synthesis may cost at most, held back from the loop (set by the run
        # when the model's price is known).
        self.answer_cost_reserve = 0.0
        self.usage = Usage()
        self._reserved_calls = 0
        self._reserved_tokens = 0
        # Calls admitted and not yet charged: counted against --max-calls from their admission, so
        # calls asked at once (children of a fan-out, each in its thread) cannot all pass a check
        # that only the replies would have failed.
        self._inflight = 0
        self._lock = threading.Lock()
        self.stopped: BudgetExceeded | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def count_from(self, started: float) -> None:
        """Measure the time limit from `started` (the start of the whole run, not of the engine)."""
        self.started = started

    def deadline(self, final: bool = False) -> float | None:
        """The monotonic time by which the loop (or, final=True, the answer) must be done."""
        if self.max_time is None:
            return None
        end = self.started + self.max_time
        return end if final else end - self.answer_reserve_s

    def time_left(self, final: bool = False) -> float | None:
        end = self.deadline(final)
        return None if end is None else end - time.monotonic()

    def out_of_time(self, note: str = "") -> BudgetExceeded:
        """The time stop (recorded as the run's stop unless another limit came first)."""
        with self._lock:
            if self.stopped is None:
                detail = f"the time limit of {self.max_time:g} s was reached" + (f" ({note})" if note else "")
                self.stopped = BudgetExceeded("time", detail)
            return self.stopped

    def check_cost(self, next_cost: float | None, final: bool = False) -> None:
        """Refuse a call that may cost more than what is left (final: the answer, which may use
        the reserve held back for it)."""
        if self.max_cost is None or next_cost is None:
            return
        with self._lock:
            spent = self.usage.cost
            room = self.max_cost - spent - (0.0 if final else self.answer_cost_reserve)
            if next_cost > room:
                detail = (
                    f"the cost limit of ${self.max_cost:g} was reached (${spent:.4f} spent; "
                    f"the next call may cost up to ${next_cost:.4f})"
                )
                if final:
                    raise BudgetExceeded("cost", detail)
                self._stop("cost", detail)

    def admit_answer(self, est_tokens: int) -> None:
        """The root synthesis: it has the call and tokens held back for it, and until max_time."""
        with self._lock:
            left = None if self.max_time is None else self.started + self.max_time - time.monotonic()
            if left is not None and left <= 0:
                raise BudgetExceeded("time", f"the time limit of {self.max_time:g} s was reached")
            if self.usage.calls + self._inflight + 1 > self.max_calls:
                raise BudgetExceeded("calls", f"the limit of {self.max_calls} model calls was reached")
            used = self.usage.prompt_tokens + self.usage.completion_tokens
            if used + est_tokens > self.max_tokens:
                raise BudgetExceeded(
                    "tokens", f"the limit of {self.max_tokens:,} tokens was reached ({used:,} used)"
                )
            self._inflight += 1

    def _check_locked(self, calls: int, tokens: int) -> None:
        if self.stopped is not None:
            raise self.stopped
        u = self.usage
        left = self.time_left()
        if left is not None and left <= 0:
            self._stop("time", f"the time limit of {self.max_time:g} s was reached")
        if self.max_cost is not None and u.cost >= self.max_cost:
            self._stop("cost", f"the cost limit of ${self.max_cost:g} was reached (${u.cost:.4f} spent)")
        # One call and its tokens stay held back for synthesis.
        if u.calls + self._inflight + self._reserved_calls + calls > self.max_calls - 1:
            self._stop("calls", f"the limit of {self.max_calls} model calls was reached")
        used = u.prompt_tokens + u.completion_tokens
        if used + self._reserved_tokens + tokens > self.max_tokens - self.synthesis_tokens:
            self._stop("tokens", f"the limit of {self.max_tokens:,} tokens was reached ({used:,} used)")

    def _stop(self, limit: str, detail: str) -> None:
        self.stopped = BudgetExceeded(limit, detail)
        raise self.stopped

    def admit(self, est_tokens: int, reservation: Reservation | None = None) -> None:
        """Allow one call of about est_tokens, from a reservation if it was made in one."""
        with self._lock:
            if reservation is not None and reservation.calls > 0:
                if self.stopped is not None:
                    raise self.stopped
                left = self.time_left()
                if left is not None and left <= 0:
                    self._stop("time", f"the time limit of {self.max_time:g} s was reached")
                take = min(reservation.tokens, est_tokens)
                reservation.calls -= 1
                reservation.tokens -= take
                self._reserved_calls -= 1
                self._reserved_tokens -= take
                # Tokens beyond what was reserved still count against the limit.
                extra = est_tokens - take
                self._inflight += 1  # held by the reservation until now: counted all along
                if extra:
                    self._check_locked(0, extra)
                return
            self._check_locked(1, est_tokens)
            self._inflight += 1

    def abandon(self) -> None:
        """An admitted call that got no reply (its provider failed): it no longer counts."""
        with self._lock:
            self._inflight = max(0, self._inflight - 1)

    def reserve(self, calls: int, tokens: int) -> Reservation:
        """Hold room for a batch of calls, or refuse the whole batch."""
        with self._lock:
            self._check_locked(calls, tokens)
            self._reserved_calls += calls
            self._reserved_tokens += tokens
            return Reservation(calls, tokens)

    def release(self, reservation: Reservation) -> None:
        with self._lock:
            self._reserved_calls -= reservation.calls
            self._reserved_tokens -= reservation.tokens
            reservation.calls = reservation.tokens = 0

    def note_failed_request(self) -> None:
        with self._lock:
            self.usage.failed_requests += 1

    def charge(self, prompt_tokens: int, completion_tokens: int, cost: float | None) -> None:
        """A reply paid for: the call it answers is counted as made, no longer as admitted."""
        with self._lock:
            self._inflight = max(0, self._inflight - 1)
            self.usage.add(prompt_tokens, completion_tokens, cost)

    def share(self, ways: int, min_calls: int) -> Reservation | None:
        """Hold a 1/`ways` share of what is left (calls, tokens) for work that keeps its own
        count elsewhere (a child on another machine); None while that share is under
        `min_calls` calls. Given back with `release`, what was used charged with `charge_usage`."""
        with self._lock:
            self._check_locked(0, 0)
            u = self.usage
            calls = self.max_calls - 1 - u.calls - self._inflight - self._reserved_calls
            left = self.max_tokens - self.synthesis_tokens - u.prompt_tokens - u.completion_tokens
            tokens = left - self._reserved_tokens
            calls, tokens = calls // max(1, ways), tokens // max(1, ways)
            if calls < min_calls or tokens <= 0:
                return None
            self._reserved_calls += calls
            self._reserved_tokens += tokens
            return Reservation(calls, tokens)

    def give_up(self, limit: str, detail: str) -> BudgetExceeded:
        """The run's stop for a limit found reached outside an admission (the first stop stands)."""
        with self._lock:
            if self.stopped is None:
                self.stopped = BudgetExceeded(limit, detail)
            return self.stopped

    def cost_share(self, ways: int) -> float | None:
        """A 1/`ways` share of the dollars left for the loop, None without a cost limit."""
        if self.max_cost is None:
            return None
        with self._lock:
            return max(0.0, self.max_cost - self.usage.cost - self.answer_cost_reserve) / max(1, ways)

    def charge_usage(self, used: Usage) -> None:
        """What work counted elsewhere used (its calls, tokens, dollars, failed requests)."""
        with self._lock:
            self.usage.merge(used)

    def room_for(self, calls: int, tokens_each: int) -> int:
        """How many of `calls` calls of tokens_each the budget could still admit."""
        with self._lock:
            u = self.usage
            by_calls = self.max_calls - 1 - u.calls - self._inflight - self._reserved_calls
            left = self.max_tokens - self.synthesis_tokens - u.prompt_tokens - u.completion_tokens
            by_tokens = (left - self._reserved_tokens) // max(1, tokens_each)
            return max(0, min(calls, by_calls, by_tokens))


def answer_reserve(max_time: float | None) -> float:
    """Seconds kept at the end of --max-time for writing the answer: 20 %, within 1-10 s."""
    if max_time is None:
        return 0.0
    return min(10.0, max(1.0, 0.2 * max_time))
