"""Running one node's actions against its worker: peek, grep, execute, restarts, the repeat guard.

A live `Node` and `rlm replay --verify` run recorded actions through this
same class, so what verify checks is what a run does. The runner reports
what it establishes to an `ActionHost` (the engine in a run; a collector in
verify) and never talks to the model.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rlm.errors import InputError
from rlm.model.budget import BudgetExceeded
from rlm.run import prompts
from rlm.run.ledger import RESULT_FINDING_CHARS, result_head
from rlm.run.typed.placeholders import as_read
from rlm.sandbox.client import InputShrank, Sandbox, WorkerLost
from rlm.text.textcap import cap_middle, cap_words
from rlm.trace.schema import FindingKind

# A computed result's finding shows RESULT_FINDING_CHARS of its output: its head and its tail, the
# middle left out and marked (rlm.run.ledger.cap_finding; the whole kept for the trace), after its
# code summarised once; a grep's shows its count and first matching lines.
CODE_SUMMARY_CHARS = 120
GREP_FINDING_LINES = 3
GREP_FINDING_LINE_CHARS = 160

REPEATED_FAILURES_STOP = 2  # the same exact call failing this often is not run again
# Refused repeats in a row that end a node's loop. Told twice to use a result it has, a model
# gains nothing from more turns; a failing call asked again unchanged gets one more telling,
# as it may be the model's way to see the error again, but one that asked 18 times burnt 11 minutes.
# A final sent again before anything was looked at is refused again: a model that ignored the
# telling once went on sending it until its time ran out (18 turns), so the second ends the loop.
REPEATS_STOP = {"result": 2, "failure": 3, "final": 2}

# Actions whose result depends on the file and the code only: what --verify re-runs.
WORKER_ACTIONS = ("peek", "grep", "execute")

# How a failed cell's finding is marked: what it printed stands, its error is no finding.
FAILED_CELL = "(the output of a failed cell: printed before its error)"


class ActionHost(Protocol):
    """Where a runner reports: findings, worker restarts, the sandbox's own faults."""

    cell_seconds: float

    def add_finding(
        self,
        text: str,
        kind: FindingKind,
        node_id: str,
        step: int,
        *,
        topic: str | None = None,
        cap: int = ...,
        code: str | None = None,
    ) -> object: ...

    def note_restart(self, node_id: str, why: str) -> None: ...

    def report_internal(self, node_id: str, message: str) -> None: ...


def text_pattern(text: str, whole: bool = False) -> str:
    """A Python regex of `text` as written, words as a line reads them (as_read: an aside in
    brackets between two); `whole`, not where a word character goes on from either end of it
    (`blk_123` is not in `blk_1234`; `rhost=` may be followed by anything)."""
    pattern = as_read(text.strip()) if len(text.split()) > 1 else re.escape(text)
    if not whole or not text:
        return pattern
    before = r"(?<![A-Za-z0-9_])" if re.match(r"\w", text[0]) else ""
    after = r"(?![A-Za-z0-9_])" if re.match(r"\w", text[-1]) else ""
    return before + pattern + after


@dataclass
class Outcome:
    """What one action gave the model: its observation and what it means for the loop."""

    observation: str
    ok: bool = True
    final: str | None = None
    fatal: str | None = None
    repeated: Literal["result", "failure", "final"] | None = None  # refused: what it would have repeated


@dataclass(frozen=True)
class Done:
    """An action already run, to tell a true repeat from the same call against changed state."""

    step: int
    shown: str  # the gist of what it showed (repeated back when the same action is asked again)
    ok: bool
    state: int  # the worker state it left behind (ActionRunner.state after it ran)


def _says(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` as a whole word, in any case."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I) is not None


def _key(name: str, args: dict[str, Any]) -> str:
    return json.dumps([name, args], sort_keys=True)


SubcallRunner = Callable[[str, dict[str, Any], int], str]


class ActionRunner:
    """One node's action path: the repeat guard, then the worker (or a sub-call the node supplies)."""

    def __init__(
        self,
        node_id: str,
        host: ActionHost,
        cap: int,
        time_left: Callable[[], float | None] = lambda: None,
        table_values: dict[str, list[list[Any]]] | None = None,
    ) -> None:
        self.node_id = node_id
        # The common values of the table's categorical columns (the profile's): a grep for one
        # of them finds nothing, as `event = 'failed_password'` is the parse's word, not the log's.
        self.table_values = table_values or {}
        self.host = host
        self.cap = cap
        self.time_left = time_left
        self.sandbox: Sandbox | None = None  # the worker, once ready
        self._launched: Sandbox | None = None  # launched, not yet seen ready
        self._ready_wait: Callable[[Sandbox], None] = lambda sandbox: None
        self.observed = False  # whether any action has run (a `final` before one is refused)
        self.done: dict[str, Done] = {}
        self.failures: dict[str, int] = {}  # how often each exact call failed
        self._held: dict[str, bool] = {}  # patterns of texts looked for in the input (holds_text)
        self._counted: dict[str, list[int]] = {}  # probes run (counts)
        # Bumped by anything that may change the worker's variables: a cell, a restart,
        # partition_map's result variable. The same code against a new state is not a repeat.
        self.state = 0

    # -- the worker ----------------------------------------------------------------
    def launch_sandbox(self, sandbox: Sandbox, ready: Callable[[Sandbox], None]) -> None:
        """Take a launched worker: it comes up (an interpreter, its imports, the input mapped,
        the lock-down) while the model writes its first reply; the first action waits for it
        (ready_sandbox), through `ready`."""
        self.sandbox = None
        self._launched, self._ready_wait = sandbox, ready

    def ready_sandbox(self) -> Sandbox:
        """The node's worker, once it is ready; raises what stopped it from starting."""
        if self.sandbox is None:
            launched = self._launched
            assert launched is not None, "the node launches its worker before its first action"
            try:
                self._ready_wait(launched)
            except BaseException:  # it never came up, or the wait was stopped: it goes
                self._launched = None
                launched.close()
                raise
            self.sandbox, self._launched = launched, None
        return self.sandbox

    def close_sandbox(self) -> None:
        """Stop the node's worker, one not yet ready included."""
        for sandbox in (self.sandbox, self._launched):
            if sandbox is not None:
                sandbox.close()
        self.sandbox = self._launched = None

    # -- the guard -----------------------------------------------------------------
    def act(
        self, name: str, args: dict[str, Any], step: int, *, visible_from: int, subcall: SubcallRunner | None
    ) -> Outcome:
        """Run an action unless it would only show again what the model can still see.

        `visible_from` is the first step whose result is still in the model's conversation.
        """
        refused = self._refusal(name, args, visible_from)
        if refused is not None:
            return refused
        key = _key(name, args)
        self.observed = True
        outcome = self._run(name, args, step, subcall)
        if name in ("execute", "partition_map"):
            self.state += 1
        self.done[key] = Done(step, _gist(outcome.observation), outcome.ok, self.state)
        if not outcome.ok:
            self.failures[key] = self.failures.get(key, 0) + 1
        return outcome

    def holds_text(self, text: str, whole: bool = False, case: bool = False) -> bool:
        """Whether some line of the input holds `text`, in any case (a grep in the worker, once a
        text); `whole`, not inside a longer word (text_pattern); `case`, in the case it is written.
        False when the worker cannot say."""
        pattern = text_pattern(text, whole)
        key = f"{'case:' if case else ''}{pattern}"
        if key not in self._held:
            reply = self._request(
                "grep",
                {"pattern": pattern, "max_matches": 1, "ignore_case": not case},
                timeout=self.cell_seconds(grace=5),
            )
            self._held[key] = isinstance(reply, dict) and bool(reply.get("ok")) and bool(reply.get("total"))
        return self._held[key]

    def counts(self, query: str) -> list[int] | None:
        """The whole numbers of the first row of `query` (a count of each condition alone,
        rlm.run.typed.matched), run in the worker outside the model's steps; None when it fails.
        Kept a run: the same probe again (a word's rows, asked of each query) is not run again."""
        if query in self._counted:
            return self._counted[query]
        reply = self._request(
            "exec", {"code": f"print(list(sql({query!r})[0]))"}, timeout=self.cell_seconds(grace=5)
        )
        if not isinstance(reply, dict) or not reply.get("ok"):
            return None
        found = re.fullmatch(r"\s*\[([\d,\s]*)\]\s*", str(reply.get("output") or ""))
        if found is None:
            return None
        self._counted[query] = [int(n) for n in found.group(1).replace(",", " ").split()]
        return self._counted[query]

    def first_rows(self, query: str, limit: int = 5) -> list[list[str]] | None:
        """The cells of the first `limit` rows of `query`, as text (a ranking rlm runs itself,
        rlm.run.typed.firststep), run in the worker outside the model's steps; None when it fails."""
        code = f"print([[str(c) for c in r] for r in sql({query!r})[:{int(limit)}]])"
        reply = self._request("exec", {"code": code}, timeout=self.cell_seconds(grace=5))
        if not isinstance(reply, dict) or not reply.get("ok"):
            return None
        try:
            cells = ast.literal_eval(str(reply.get("output") or "").strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(cells, list) or not all(
            isinstance(r, list) and all(isinstance(c, str) for c in r) for r in cells
        ):
            return None
        return cells

    def would_refuse(self, name: str, args: dict[str, Any], visible_from: int) -> bool:
        """Whether `act` would refuse this action as a repeat of one already run."""
        return self._refusal(name, args, visible_from) is not None

    def _refusal(self, name: str, args: dict[str, Any], visible_from: int) -> Outcome | None:
        key = _key(name, args)
        before = self.done.get(key)
        if before is None:
            return None
        if not before.ok and self.failures.get(key, 0) >= REPEATED_FAILURES_STOP:
            # Failing cells alternating (A fails, B fails, A again...) change the state each time,
            # yet nothing is learnt: the third failure of the same call is the last.
            return Outcome(
                prompts.repeated_failure(name, before.step, before.shown), ok=False, repeated="result"
            )
        if not self._would_repeat(name, before, visible_from):
            return None
        if before.ok:
            # Small models loop on one action; running it again would show them the same thing.
            return Outcome(prompts.repeated_action(before.step, before.shown), ok=False, repeated="result")
        # The same failing call, nothing changed since: say so (see REPEATS_STOP).
        return Outcome(
            prompts.repeated_failure(name, before.step, before.shown), ok=False, repeated="failure"
        )

    def _would_repeat(self, name: str, before: Done, visible_from: int) -> bool:
        """True when running the action again would show what the model can still see."""
        if before.step < visible_from:
            return False  # its result left the conversation: running it again is how to see it
        if name == "execute":
            return self.state == before.state  # a cell's result depends on the variables
        return True  # peek, grep and sub-calls depend on the file and the question only

    def _run(self, name: str, args: dict[str, Any], step: int, subcall: SubcallRunner | None) -> Outcome:
        if name in ("peek", "grep"):
            return self._worker_op(name, args, step)
        if name == "execute":
            return self._execute(args["code"], step)
        if name in ("llm_query", "partition_map") and subcall is not None:
            return self._guarded_subcall(name, args, step, subcall)
        return Outcome(f"unknown action {name}", ok=False)

    def _guarded_subcall(self, name: str, args: dict[str, Any], step: int, subcall: SubcallRunner) -> Outcome:
        from rlm.errors import RlmError

        try:
            text = subcall(name, args, step)
        except BudgetExceeded:
            raise
        except RlmError as exc:
            return Outcome(f"error: {exc.message}", ok=False)
        return Outcome(cap_middle(text, self.cap))

    # -- the worker ----------------------------------------------------------------
    def _worker_op(self, op: str, args: dict[str, Any], step: int) -> Outcome:
        reply = self._request(op, args, timeout=self.cell_seconds(grace=5))
        if isinstance(reply, Outcome):
            return reply
        if not reply.get("ok"):
            return Outcome(f"error: {reply.get('error')}", ok=False)
        output = str(reply.get("output", ""))
        if op == "grep":
            total = int(reply.get("total", 0))
            what = f"grep /{args['pattern']}/{' (ignoring case)' if args['ignore_case'] else ''}"
            # The evidence with the count: the first matching lines, as numbered lines.
            shown = [cap_words(ln.strip(), GREP_FINDING_LINE_CHARS) for ln in output.splitlines()[1:]][
                :GREP_FINDING_LINES
            ]
            first = f"; first: {' / '.join(shown)}" if shown else ""
            self.host.add_finding(
                f"{what} matches {total:,} line{'s' if total != 1 else ''}{first}",
                "grep",
                self.node_id,
                step,
                topic=what,
            )
            hint = self._table_hint(str(args["pattern"])) if total == 0 else None
            if hint is not None:
                output += "\n" + hint
        return Outcome(cap_middle(output, self.cap))

    def _table_hint(self, pattern: str) -> str | None:
        """For a grep that matched nothing: the query that finds in the table what it looked for.

        Either the pattern is one of a column's common values, as a model copies it from the
        profile (`failed_password` is the parse's word, not the log's), or it names a column
        as if the lines held fields (`payment = "cash"` in a CSV).
        """
        wanted = pattern.strip().strip("'\"")
        for column, pairs in self.table_values.items():
            if any(isinstance(v, str) and v == wanted for v, _ in pairs):
                return prompts.grep_for_a_table_value(wanted, column)
        for column, pairs in self.table_values.items():
            if _says(pattern, column):
                value = next((v for v, _ in pairs if isinstance(v, str) and _says(pattern, v)), None)
                return prompts.grep_for_a_column(pattern, column, value)
        return None

    def _execute(self, code: str, step: int) -> Outcome:
        seconds = self.cell_seconds()
        # The wall clock allows for the CPU timer and the kernel's kill that follows it.
        reply = self._request(
            "exec", {"code": code, "cpu_seconds": seconds}, timeout=self.cell_seconds(grace=4)
        )
        if isinstance(reply, Outcome):
            return reply
        notes = [str(n) for n in reply.get("notes") or []]
        for note in notes:
            self.host.add_finding(note, "note", self.node_id, step)
        output = str(reply.get("output") or "")
        # note()'s own echo is not a second finding: the note is one already.
        echoes = {f"noted: {n}".strip() for n in notes}
        computed = "\n".join(line for line in output.strip().splitlines() if line.strip() not in echoes)
        error = reply.get("error")
        parts = []
        if output:
            parts.append(cap_middle(output, self.cap))
        if error:
            parts.append(f"error: {error}")
            if str(error).startswith("SyntaxError") and _looks_like_prose(code):
                parts.append(prompts.PROSE_NOT_CODE)
            elif str(error).startswith("SyntaxError") and re.match(r"\s*final\s*\(", code):
                parts.append(prompts.FINAL_TAKES_A_VALUE)
            elif "name 'execute' is not defined" in str(error):
                parts.append(prompts.EXECUTE_IS_NOT_A_FUNCTION)
        if not parts:
            parts.append(prompts.NO_OUTPUT)
        elif computed.strip():
            # Every computed result is a finding, capped for prompts (the cut marked, the whole kept);
            # a cell that failed after printing keeps what it printed, marked so: never its error.
            summary = code_summary(code)
            failed = f"{FAILED_CELL} " if error else ""
            self.host.add_finding(
                f"{failed}{output.strip()}",
                "result",
                self.node_id,
                step,
                # The whole code, not its summary: two cells that open alike are two questions.
                topic="\n".join(ln.rstrip() for ln in code.strip().splitlines()),
                cap=len(result_head(summary)) + len(failed) + RESULT_FINDING_CHARS,
                code=summary,
            )
        final = reply.get("final")
        if final:
            self.host.add_finding(str(final), "final_draft", self.node_id, step, topic="final_draft")
        return Outcome("\n".join(parts), ok=not error, final=str(final) if final else None)

    def cell_seconds(self, grace: float = 0.0) -> float:
        """The per-cell limit (+ grace for the wall clock), cut to what is left of --max-time."""
        limit = self.host.cell_seconds + grace
        left = self.time_left()
        return limit if left is None else max(1.0, min(limit, left + min(grace, 1.0)))

    def _request(self, op: str, args: dict[str, Any], timeout: float) -> dict[str, Any] | Outcome:
        try:
            sandbox = self.ready_sandbox()
        except (WorkerLost, OSError) as exc:
            why = f"the sandbox could not start: {exc}"
            return Outcome(f"error: {why}", ok=False, fatal=why)
        try:
            reply = sandbox.request(op, timeout=timeout, **args)
        except InputShrank as exc:
            # The file was cut while the run read it: a restarted worker would map other bytes
            # than the index describes, and an answer would mix the two. The run ends (exit 3).
            raise InputError(
                f"the input changed during the run ({exc}): no answer is given from a mix of its "
                "old and new contents; ask again once it is stable"
            ) from None
        except WorkerLost as exc:
            why = str(exc)
            try:
                sandbox.restart()
            except WorkerLost as again:
                return Outcome(
                    f"error: {why}; the sandbox could not be restarted", ok=False, fatal=str(again)
                )
            self.state += 1
            self.host.note_restart(self.node_id, why)
            return Outcome(
                f"error: your code was stopped: {why}. The sandbox was restarted and all your variables "
                "are gone (context, context_lines and the helpers are back).",
                ok=False,
            )
        if reply.get("restarted"):
            why = str(reply["restarted"])
            self.state += 1
            self.host.note_restart(self.node_id, why)
            reply["error"] = (
                f"{reply.get('error')}\n{why}; it was restarted and all your variables are gone "
                "(context, context_lines and the helpers are back). Keep less in memory."
            )
        # A fault of the sandbox's own is the user's business too, not only the model's.
        if reply.get("internal"):
            self.host.report_internal(self.node_id, f"{op}: {reply.get('error')}")
        for module in reply.get("late_imports") or []:
            self.host.report_internal(self.node_id, f"{op}: module {module!r} was imported after lock-down")
        for module in reply.get("refused_imports") or []:
            self.host.report_internal(
                self.node_id,
                f"{op}: module {module!r} was imported by an allowed module as it ran, and refused",
            )
        return reply


def _looks_like_prose(code: str) -> bool:
    """A sentence where code should be: several words and none of Python's punctuation."""
    first = next((ln.strip() for ln in code.splitlines() if ln.strip()), "")
    words = first.split()
    return (
        len(words) >= 5
        and words[0][:1].isupper()
        and words[0] not in ("True", "False", "None")
        and "=" not in first
        and not re.match(r"^[\w.]+\(", first)
    )


def code_summary(code: str) -> str:
    """The code behind a result, said once and short: all of it if small, else its first line
    (capped, the cut marked) and how many lines follow. A finding's room is for what it printed."""
    lines = [ln.strip() for ln in code.strip().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    joined = "; ".join(lines)
    if len(joined) <= CODE_SUMMARY_CHARS:
        return joined
    first = lines[0] if len(lines[0]) <= CODE_SUMMARY_CHARS - 20 else _cut(lines[0], CODE_SUMMARY_CHARS - 20)
    more = len(lines) - 1
    return f"{first}; … {more} more line{'s' if more != 1 else ''}" if more else first


def _cut(line: str, chars: int) -> str:
    """A line's start at a word boundary, marked as cut."""
    cut = line[:chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > chars // 2 else cut).rstrip() + " …"


def _gist(observation: str, chars: int = 240) -> str:
    """What an observation showed, on one line: a refused repeat says it again, so a model that
    asks twice gets the value itself ("count_star() / 520 / (1 row)"), not just a header."""
    lines = [ln.strip() for ln in observation.splitlines()]
    kept = [ln for ln in lines if ln and not set(ln) <= set("-+| ")]
    return cap_words(" / ".join(kept), chars)
