"""The settings `rlm replay --verify` and `--rerun` run under: the user's own, never the trace's.

A trace is a record to show. A crafted one (a repository can ship any JSON) could
otherwise point the input cache at the user's documents, where the cache sweep
deletes old files, or lift the sandbox's memory and time limits. So everything
that touches the filesystem or the sandbox (cache, traces, memory database, cell
time, memory headroom, concurrency, time limits) is resolved from the user's
flags, environment and config. Only settings that shape the recorded steps (the
observation cap, prompt sizes, the loop's budgets, the protocol) are taken from
the trace, each checked as the same setting from the user would be; a recorded
value that is not used is said, in one line.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from rlm.run.settings import Settings, coerce

# What `--verify` needs of the run's settings to reproduce its observations.
VERIFY_FROM_TRACE = ("max_observation_chars",)
# What `--rerun` needs to drive the loop as it went: prompt sizes and budgets. Model calls
# are scripted, so a budget here costs nothing; it only stops the loop where it stopped.
RERUN_FROM_TRACE = (
    "protocol",
    "max_steps",
    "max_depth",
    "max_calls",
    "max_tokens",
    "max_cost",
    "max_observation_chars",
    "history_tokens",
    "sub_prompt_tokens",
    "reply_max_tokens",
    "temperature",
    "no_reroute",
    "since",  # recorded resolved (an absolute time), so `2h` means the run's two hours
    "until",
)
# The user's settings a replay uses that a trace could try to set: a recorded value that
# differs is said.
VERIFY_USES = ("cache_dir", "cell_timeout", "memory_headroom_mb")
RERUN_USES = (*VERIFY_USES, "trace_dir", "max_time")

_KNOWN = {f.name for f in fields(Settings)}


def recorded_settings(doc: dict[str, Any]) -> dict[str, Any]:
    recorded = doc.get("settings")
    return {k: v for k, v in recorded.items() if k in _KNOWN} if isinstance(recorded, dict) else {}


def replay_settings(
    doc: dict[str, Any],
    user: Settings,
    *,
    from_trace: tuple[str, ...],
    uses: tuple[str, ...],
    fixed: dict[str, Any] | None = None,
) -> tuple[Settings, dict[str, tuple[str, str]]]:
    """(the settings to replay under, {name: (recorded, used)} for each recorded value not used).

    `user` is what the user's flags, environment and config resolve to; `fixed` is what
    the replay itself sets (a scripted model, one sub-call at a time)."""
    recorded = recorded_settings(doc)
    taken: dict[str, Any] = {}
    for name in from_trace:
        if name in recorded:
            try:
                taken[name] = coerce(name, recorded[name])
            except ValueError:
                pass  # out of type or bounds: the user's value stands, and the difference is said
    settings = replace(user, **{**taken, **(fixed or {})})
    ignored = [
        name
        for name in (*uses, *(n for n in from_trace if n in recorded and n not in taken))
        if name in recorded and recorded[name] != getattr(settings, name)
    ]
    return settings, {name: (shown(recorded[name]), shown(getattr(settings, name))) for name in ignored}


def observation_chars(value: Any, default: int) -> int:
    """A node's recorded observation cap, when it is a valid one; else the settings'."""
    try:
        checked = coerce("max_observation_chars", value)
    except ValueError:
        return default
    return int(checked) if checked is not None else default


def shown(value: Any) -> str:
    """A recorded value for a terminal line: repr() makes control characters visible."""
    if value is None:
        return "default"
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def difference_line(ignored: dict[str, tuple[str, str]]) -> str:
    """The one stderr line that says which recorded values were not used, and what was."""
    recorded = ", ".join(f"{name}={was}" for name, (was, _) in ignored.items())
    mine = ", ".join(f"{name}={now}" for name, (_, now) in ignored.items())
    return f"this trace was recorded with {recorded}; replaying with your own settings ({mine})"
