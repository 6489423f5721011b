"""One budget for the whole tree of nodes: calls, tokens, dollars, wall time.

Calls are admitted before they are made, so a limit stops the run before it
is crossed. A fan-out reserves room for all of its calls first, so parallel
children cannot overspend between them. One synthesis call is always held
back: the run can always write its answer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


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

    def add(self, prompt_tokens: int, completion_tokens: int, cost: float | None) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if cost is None:
            self.unpriced_calls += 1
        else:
            self.cost += cost

    def to_dict(self) -> dict:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            # Unknown prices stay unknown: a sum that leaves calls out would understate the cost.
            "cost_usd": None if self.unpriced_calls else round(self.cost, 6),
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
    ) -> None:
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.max_time = max_time
        self.synthesis_tokens = synthesis_tokens
        self.started = time.monotonic()
        self.usage = Usage()
        self._reserved_calls = 0
        self._reserved_tokens = 0
        self._lock = threading.Lock()
        self.stopped: BudgetExceeded | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _check_locked(self, calls: int, tokens: int) -> None:
        if self.stopped is not None:
            raise self.stopped
        u = self.usage
        if self.max_time is not None and self.elapsed() >= self.max_time:
            self._stop("time", f"the time limit of {self.max_time:g} s was reached")
        if self.max_cost is not None and u.cost >= self.max_cost:
            self._stop("cost", f"the cost limit of ${self.max_cost:g} was reached (${u.cost:.4f} spent)")
        # One call and its tokens stay held back for synthesis.
        if u.calls + self._reserved_calls + calls > self.max_calls - 1:
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
                if self.max_time is not None and self.elapsed() >= self.max_time:
                    self._stop("time", f"the time limit of {self.max_time:g} s was reached")
                take = min(reservation.tokens, est_tokens)
                reservation.calls -= 1
                reservation.tokens -= take
                self._reserved_calls -= 1
                self._reserved_tokens -= take
                # Tokens beyond what was reserved still count against the limit.
                extra = est_tokens - take
                if extra:
                    self._check_locked(0, extra)
                return
            self._check_locked(1, est_tokens)

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

    def charge(self, prompt_tokens: int, completion_tokens: int, cost: float | None) -> None:
        with self._lock:
            self.usage.add(prompt_tokens, completion_tokens, cost)

    def room_for(self, calls: int, tokens_each: int) -> int:
        """How many of `calls` calls of tokens_each the budget could still admit."""
        with self._lock:
            u = self.usage
            by_calls = self.max_calls - 1 - u.calls - self._reserved_calls
            left = self.max_tokens - self.synthesis_tokens - u.prompt_tokens - u.completion_tokens
            by_tokens = (left - self._reserved_tokens) // max(1, tokens_each)
            return max(0, min(calls, by_calls, by_tokens))
