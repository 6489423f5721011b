"""How a memory earns or loses its place: feedback deltas, tiers, retirement, confidence.

Pure functions over numbers, so the rules are read (and tested) in one place:

- feedback on a run: every memory the run cited moves by worked +0.2, failed -0.3,
  partial +0.05; every memory offered to it but not cited by -0.05; scores start
  at 0.5 and stay in [0, 1];
- tiers: working (kept 24 h after its last use) -> history (score >= 0.7 and cited
  >= 2 times; kept 30 days) -> pattern (score >= 0.9, cited >= 3 times, >= 5
  successes; kept), demoted back to history when its score falls below 0.4; below
  0.2 a memory is retired;
- feedback confidence: the Wilson lower bound (95 %) of its success rate under feedback
  (not the confidence its run's synthesis gave the answer, which the store keeps beside it);
- bounds (applied by `MemoryStore.prune`, at most once a day, and by `rlm memory prune`): a
  memory unused for 30 days is deleted unless it is a pattern, and at most 10,000 are kept
  (retired ones, then the least recently used, go first); run records go after 90 days (at
  most 20,000); a sub-call cache entry unused for 30 days goes, and the cache keeps at most
  20,000 entries and 64 MB of answers (the least recently used go first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["worked", "failed", "partial"]
Tier = Literal["working", "history", "pattern", "retired"]

START_SCORE = 0.5
DELTA: dict[str, float] = {"worked": 0.2, "failed": -0.3, "partial": 0.05}
OFFERED_NOT_CITED = -0.05
RETIRE_BELOW = 0.2
KEEP_SECONDS: dict[str, float | None] = {"working": 24 * 3600.0, "history": 30 * 86400.0, "pattern": None}

# The bounds of the database (see the module); docs/memory.md states them for users.
MEMORY_UNUSED_DAYS = 30
MAX_MEMORIES = 10_000
RUN_DAYS = 90
MAX_RUNS = 20_000
SUBCALL_UNUSED_DAYS = 30
MAX_SUBCALLS = 20_000
MAX_SUBCALL_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Standing:
    """What the rules read and write of one memory."""

    score: float = START_SCORE
    cited: int = 0
    successes: int = 0
    failures: int = 0
    tier: Tier = "working"


def clamp(score: float) -> float:
    return min(1.0, max(0.0, round(score, 6)))


def apply_feedback(s: Standing, outcome: Outcome, *, cited: bool) -> Standing:
    """The standing after feedback on a run that cited (or was only offered) this memory."""
    if cited:
        score = clamp(s.score + DELTA[outcome])
        successes = s.successes + (outcome == "worked")
        failures = s.failures + (outcome == "failed")
    else:
        score, successes, failures = clamp(s.score + OFFERED_NOT_CITED), s.successes, s.failures
    return retier(Standing(score, s.cited, successes, failures, s.tier))


def retier(s: Standing) -> Standing:
    """The tier the rules give this standing (retirement is final)."""
    if s.tier == "retired" or s.score < RETIRE_BELOW:
        tier: Tier = "retired"
    elif s.tier == "pattern":
        tier = "history" if s.score < 0.4 else "pattern"
    elif s.score >= 0.9 and s.cited >= 3 and s.successes >= 5:
        tier = "pattern"
    elif s.tier == "history" or (s.score >= 0.7 and s.cited >= 2):
        tier = "history"
    else:
        tier = "working"
    return Standing(s.score, s.cited, s.successes, s.failures, tier)


def expired(tier: str, last_used: float, now: float) -> bool:
    """Whether a memory of this tier, last used (or made) at `last_used`, is past its keeping time."""
    if tier == "retired":
        return True
    keep = KEEP_SECONDS.get(tier)
    return keep is not None and now - last_used > keep


def confidence(successes: int, failures: int, z: float = 1.96) -> float:
    """Wilson lower bound of the success rate; 0 without any judged use."""
    n = successes + failures
    if n == 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt((p * (1 - p) + z * z / (4 * n)) / n)
    return max(0.0, (centre - margin) / (1 + z * z / n))
