"""One RLM node: the turn loop over one context (the file, or a slice of it).

Each turn: the bounded prompt (rlm.run.node_prompt), one model call, one action
parsed from the reply and run, the turn remembered. The loop ends at `final`, at
the step cap, at a budget stop, when the model is stuck or when the provider
fails; the node never writes the answer itself, synthesis does
(rlm.run.node_synthesis). The node knows its run only as a `NodeHost`
(rlm.run.host): it never imports the engine.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable
from typing import Any

from rlm.errors import RlmError
from rlm.model.budget import BudgetExceeded
from rlm.model.client import Reply
from rlm.run import prompts
from rlm.run.actions import Action, ParseError, parse_tool_call, text_actions, tool_schemas
from rlm.run.answer_kind import asked_kind, columns_of_kind, echoed, misfit, unasked_time
from rlm.run.doubts import EXAMPLE_COPIED, kind_doubt, measure_doubt, rows_doubt
from rlm.run.events import Phase
from rlm.run.host import NodeHost, StepDone
from rlm.run.node_prompt import NodePrompt, PromptShape
from rlm.run.runner import REPEATS_STOP, ActionRunner, Outcome
from rlm.run.scope import Asker, NodeResult, NodeScope
from rlm.run.settings import sizing_for
from rlm.run.typed import (
    action_schema,
    describe_actions,
    left_out,
    quoted_left_out,
    to_action,
    unstated,
    with_question_conditions,
    with_stated_in_place,
)
from rlm.run.typed.as_shown import as_shown, shown_order
from rlm.run.typed.check import Problem
from rlm.run.typed.compile import amendable, compile_sql, read_json
from rlm.run.typed.describe import example_cells
from rlm.run.typed.empties import left_empty
from rlm.run.typed.fields import sample_lines, with_quoted_fields
from rlm.run.typed.filled import onto_filled_field
from rlm.run.typed.firststep import FirstStep, first_step, onto_first_step
from rlm.run.typed.matched import Matched, counted_filters, found_nothing, matched, shown_count
from rlm.run.typed.measure import measure_left_out, with_asked_measure
from rlm.run.typed.miscopied import miscopied
from rlm.run.typed.ranked import (
    fewest_first,
    list_left_short,
    lone_value,
    measure_for_key,
    off_top,
    one_said,
    ranked_in_full,
    ranked_keys,
    ranked_measures,
    top_tied,
    unasked_top,
)
from rlm.run.typed.seconds import in_seconds
from rlm.run.typed.share import with_share
from rlm.run.typed.spans import with_spans
from rlm.run.typed.steps import asks_in_two_steps, found_filter, second_step
from rlm.run.typed.unreached import unreached_doubt
from rlm.run.typed.whether import count_contradicted
from rlm.run.typed.window import with_line_zone
from rlm.run.typed.wordvalue import onto_word_of_value
from rlm.sandbox.client import WorkerLost
from rlm.trace.schema import BridgeCallRecord, StopReason
from rlm.trace.writer import preview

EMPTY_REPLIES_STOP = 3  # empty replies in a row that end a node's loop


class Node:
    def __init__(self, host: NodeHost, node_id: str, depth: int, question: str, scope: NodeScope) -> None:
        self.host = host
        self.id = node_id
        self.depth = depth
        self.question = question
        self.scope = scope
        self.model = host.model_for(depth)
        table = host.table if scope.spec.table_path else None
        protocol = host.protocol_for(self.model)
        # A typed action compiles to a query on the table: without one (a slice's child) it is text.
        self.protocol = "text" if protocol == "typed" and not table else protocol
        # The values the question's quoted lines hold are columns too (rlm.run.typed.fields).
        # And the zone the input's lines write their times in (rlm.run.typed.window). The first
        # lines are read once, and only where either needs them. And how long a row took, where
        # the question asks (rlm.run.typed.spans), and a count's share of the rows, where a
        # percentage is asked (rlm.run.typed.share).
        sample = functools.cache(functools.partial(sample_lines, scope.spec.path))
        self.table = (
            with_share(
                with_spans(with_line_zone(with_quoted_fields(table, question, sample), sample), question),
                question,
            )
            if self.protocol == "typed" and table
            else None
        )
        self.schema = action_schema(self.table) if self.table else None
        # Until an action has run a final is refused: the grammar then does not offer one.
        self.first_schema = action_schema(self.table, answering=False) if self.table else None
        # The prompt's example queries as they run: an answer after one is in doubt (rlm.run.doubts).
        self.example_cells = example_cells(self.table) if self.table else frozenset()
        self.tools = tool_schemas() if self.protocol == "tools" else None
        self.window = self.model.context_window()
        self.sizing = sizing_for(host.settings, self.window)
        self.cap = self.sizing.observation_chars
        shape = PromptShape(
            protocol=self.protocol,
            sizing=self.sizing,
            window=self.window,
            tools_tokens=self.model.estimate_prompt_tokens([], self.tools) if self.tools else 0,
            cell_seconds=host.cell_seconds,
            typed_actions=describe_actions(self.table) if self.table else "",
        )
        self.prompt = NodePrompt(node_id, depth, question, scope, shape, host.settings, host)
        self.runner = ActionRunner(
            node_id,
            host,
            self.cap,
            time_left=host.budget.time_left,
            table_values=(table or {}).get("values"),
        )
        # The step being run: what the worker's code asks for while it runs belongs to it.
        self.step = 0
        self.largest_prompt = 0
        # A table still being built as the node started is told of once built (rlm.input.tablejob).
        self.table_untold = scope.spec.table_pending
        self.repeats = 0  # refused repeats in a row
        self.empties = 0  # empty replies in a row
        self.unusable = ""  # why the last reply could not be used, if it could not
        # What the question names that the last typed query left out: a final answer after it is in doubt.
        self.left_out: list[str] = []
        # Each query that ran (its text): its doubts, its ranking's rows, whole or not, and keys.
        self.shown_of: dict[str, tuple[list[str], list[tuple[str, str]], bool, list[str]]] = {}
        # The model's actions (their JSON) rlm added conditions to: sent again, they run as written.
        # And what each became: sent again right after a refused final, it becomes the same again.
        self.amended: dict[str, tuple[Action, str]] = {}
        # The kind of value the question asks for: a final of another kind is refused once, and
        # the next turn's grammar offers no final (a small model sends the same final again).
        self.asked = asked_kind(question)
        self.kind_refused = False
        self.look_again = False
        # The keys of the last typed ranking of several rows, in rank order (rlm.run.typed.ranked):
        # a final naming a lower one where the most is asked is refused once too, then in doubt.
        self.ranked: list[str] = []
        self.ranked_fewest = False  # that ranking is a group fewest first
        self.shown_keys: list[str] = []  # the keys of the last query, if it ranked
        self.cut_ranking: str | None = None  # that query, where its LIMIT cut it to one row
        # Fields the question names that no typed query reads (rlm.run.typed.unreached).
        self.unreached = unreached_doubt(question, self.table) if self.table else None
        # The (key, count or total) rows of the last typed query, if a ranking: a final giving a
        # row's count where the question asks which value is refused once too, then in doubt.
        self.measured: list[tuple[str, str]] = []
        self.in_full = False  # whether that ranking shows every row its query found
        # A question that asks in two steps (rlm.run.typed.steps) is answered by a query that
        # filters on a value an earlier one found: a final before one is refused once too, then
        # in doubt.
        self.two_steps = asks_in_two_steps(question)
        self.found: set[str] = set()  # the values earlier rankings found (their first cells)
        # The filter on the first value of the last ranking: what the refusal of an early final names.
        self.found_filter: dict[str, Any] | None = None
        self.stepped = False  # whether a query has filtered on one of them
        # The cells of the last query's rows, each once, in the rows' order (as_shown, miscopied).
        self.shown_order: list[str] = []
        self.last_count: int | None = None  # the last typed count with conditions (rlm.run.typed.whether)
        # What the node was shown: the question and each action's output, the last _SEEN_CHARS of it.
        self.seen = question
        # The ranking of the first step that rlm runs itself where a query skips it, once a node.
        self.first_step: FirstStep | None = None
        self.first_step_run = False

    def last_observations(self, count: int) -> list[str]:
        """What the model saw last (the end of the conversation), for the synthesis."""
        return self.prompt.last_observations(count)

    # -- the loop -------------------------------------------------------------
    def run(self) -> NodeResult:
        max_steps = self.host.settings.max_steps
        try:
            # The worker comes up while the model writes its first reply. One that cannot start
            # ends the node (status "sandbox"; for a child, an observation of its parent): at once
            # when it cannot be launched, at the first action when it never gets ready.
            try:
                launched = self.host.launch_sandbox(self.scope.spec, self._bridge)
            except (WorkerLost, OSError) as exc:
                return self._result(None, "sandbox", 0, f"the sandbox could not start: {exc}")
            self.runner.launch_sandbox(launched, self.host.sandbox_ready)
            for step in range(1, max_steps + 1):
                self.step = step
                ended = self._turn(step, max_steps)
                if ended is not None:
                    return ended
            return self._result(None, "max_steps", max_steps, f"the step limit of {max_steps} was reached")
        finally:
            self.runner.close_sandbox()

    def _turn(self, step: int, max_steps: int) -> NodeResult | None:
        """One turn: messages -> model -> parse -> act -> remember. The result if it ends the loop."""
        host = self.host
        messages = self.prompt.messages()
        est = self.model.estimate_prompt_tokens(messages, self.tools)
        self.largest_prompt = max(self.largest_prompt, est)
        try:
            host.budget.admit(est)
            started = time.monotonic()
            host.progress(Phase(f"waiting for the model ({self.id}, step {step})"))
            reply = self.model.complete(
                messages,
                tools=self.tools,
                max_tokens=self.sizing.reply_tokens,
                schema=self.schema if self.runner.observed and not self.look_again else self.first_schema,
            )
        except BudgetExceeded as exc:  # refused, or the time (or the cost) ran out while it was asked
            return self._result(None, "budget", step - 1, exc.detail)
        host.charge(self.id, reply)
        if self.model.measures_usage:
            self.prompt.learn_ratio(reply.prompt_tokens, est)
        action, skipped = self._parse(reply)
        ran, added, changed, timed, stepped = reply.content, list[str](), None, None, None
        table = self.table
        query = (
            action if table is not None and isinstance(action, Action) and action.name == "execute" else None
        )
        if query is not None or (
            table is not None and isinstance(action, ParseError) and amendable(reply.content, table)
        ):
            # A query refused only as it would run may be amended into one that runs.
            action, ran, added, changed, timed, stepped = self._with_conditions(action, reply.content)
            query = action if isinstance(action, Action) else None
        # The prompt's example as shown, nothing of the question's added: a small model copies it
        # whatever the question asks. It runs (refused once, the 1.5B model sent it again word for
        # word, 9 times of 9), the model is told, and an answer after it is in doubt.
        copied = (
            query is not None and not added and not changed and query.args.get("code") in self.example_cells
        )
        stopped: BudgetExceeded | None = None
        try:
            if isinstance(action, Action):
                host.progress(Phase(f"running {action.name} ({self.id}, step {step})"))
            outcome = self._act(action, step)
        except BudgetExceeded as exc:  # a sub-call hit a limit: this step is the last
            stopped = exc
            outcome = Outcome(f"stopped: {exc.detail}", ok=False)
        if skipped:
            outcome.observation = prompts.ran_a_later_block(skipped) + outcome.observation
        told = None
        if self.table_untold and (told := host.table_news()) is not None:
            self.table_untold = False
            self.runner.table_values = (host.table or {}).get("values") or {}
        if table is not None and query is not None:
            conditions = left_out(self.question, ran, table) + quoted_left_out(
                self.question, ran, table, self.runner.holds_text
            )
            other_measure = measure_left_out(self.question, ran, table)
            # A value the question names in no way, unless an earlier ranking found it (a second step).
            unsaid = unstated(self.question, ran, table, self.found)
            self.left_out = [*conditions, *map(measure_doubt, other_measure)]
            self.left_out += [rows_doubt(f"kept only {u}, which the question does not state") for u in unsaid]
            self.left_out += [EXAMPLE_COPIED] if copied else []
            self.left_out += [rows_doubt(self.unreached)] if self.unreached else []
            notes = [prompts.conditions_added_note(added)] if added else []
            notes += [prompts.left_out_note(conditions)] if conditions and not added else []
            notes += [prompts.measure_changed_note(changed)] if changed else []
            notes += [prompts.seconds_note(timed)] if timed else []
            notes += [prompts.first_step_note(stepped)] if stepped else []
            notes += [prompts.measure_left_out_note(other_measure)] if other_measure else []
            notes += [prompts.unstated_note(unsaid)] if unsaid else []
            notes += [prompts.example_ran_note()] if copied else []
            # A ranking of one row (a top-1 after the refusal) ranks nothing: the last one of
            # several rows is kept.
            if len(keys := ranked_keys(ran, outcome.observation, table) if outcome.ok else []) > 1:
                self.ranked, self.ranked_fewest = keys, fewest_first(ran, table)
            if outcome.ok:  # of the last query that ran: a later one may have kept one row
                self.shown_keys = keys
                # One row of a ranking its LIMIT cut: whether it is alone is asked when it matters.
                cut = len(keys) == 1 and not ranked_in_full(outcome.observation)
                self.cut_ranking = ran if cut else None
            self.found_filter = found_filter(ran, keys, table) or self.found_filter
            self.measured = ranked_measures(ran, outcome.observation, table) if outcome.ok else []
            self.shown_order = shown_order(outcome.observation) if outcome.ok else self.shown_order
            if outcome.ok:  # a repeat (not run) leaves the count its query gave
                # The prompt's example copied counts what the question need not ask about.
                counted = bool(counted_filters(ran, table)) and not copied
                self.last_count = shown_count(outcome.observation) if counted else None
            self.in_full = ranked_in_full(outcome.observation)
            self.stepped = self.stepped or (outcome.ok and second_step(ran, self.found))
            self.found |= {key for key, _ in self.measured}
            if (
                outcome.ok
                and (lone := lone_value(self.question, ran, outcome.observation, table)) is not None
            ):
                self.left_out.append(rows_doubt(lone[1]))
                notes.append(lone[0])
            if outcome.ok and (rows := self._matched(ran, outcome.observation, table)) is not None:
                self.left_out += [rows_doubt(rows.doubt)] if rows.doubt else []
                notes.append(rows.note)
            if (
                outcome.ok
                and (none := found_nothing(ran, outcome.observation, table, self.runner.counts)) is not None
            ):
                self.left_out += [rows_doubt(none.doubt)] if none.doubt else []
                notes.append(none.note)
            if outcome.ok and (tied := top_tied(self.question, ran, outcome.observation, table)) is not None:
                self.left_out.append(rows_doubt(tied[1]))
                notes.append(tied[0])
            if outcome.ok and (many := one_said(self.question, ran, outcome.observation, table)) is not None:
                self.left_out.append(rows_doubt(many[1]))
                notes.append(many[0])
            if outcome.ok and (empty := left_empty(ran, table, self.runner.first_rows)) is not None:
                notes.append(empty)
            # A query sent again is not run: what the final is checked against is what it showed
            # when it ran (its doubts: a note on its rows, a tie; its ranking, whole or not),
            # not nothing. A list left short, refused once, was taken whole after a repeat.
            if outcome.ok:
                self.shown_of[ran] = (list(self.left_out), self.measured, self.in_full, self.shown_keys)
            elif outcome.repeated == "result" and ran in self.shown_of:
                doubts, self.measured, self.in_full, self.shown_keys = self.shown_of[ran]
                self.left_out = list(doubts)
            for note in notes:
                told = note if told is None else told.rstrip("\n") + "\n" + note
        # The model reads the run's notes (the table's news, a condition left out) after what
        # the action showed; the trace keeps them apart (`rlm replay --verify` compares the
        # action's own output).
        seen = outcome.observation if told is None else outcome.observation.rstrip("\n") + "\n" + told
        self.seen = (self.seen + "\n" + outcome.observation)[-_SEEN_CHARS:]
        self.prompt.remember(reply, action, seen, step, max_steps - step, tools=self.protocol == "tools")
        payload = self.prompt.payload
        host.record_step(
            StepDone(
                self.id,
                self.depth,
                step,
                messages,
                est,
                reply,
                action,
                outcome,
                time.monotonic() - started,
                dropped_turns=self.prompt.dropped,
                context=payload.to_dict() if payload else {},
                told=told,
            )
        )
        return self._ended(step, reply, outcome, stopped)

    def _ended(
        self, step: int, reply: Reply, outcome: Outcome, stopped: BudgetExceeded | None
    ) -> NodeResult | None:
        """How the loop ends after this step, if it does."""
        if stopped is not None:
            return self._result(None, "budget", step, stopped.detail)
        if outcome.final is not None:
            return self._result(outcome.final, "final", step)
        if outcome.fatal:
            return self._result(None, "sandbox", step, outcome.fatal)
        self.empties = 0 if (reply.content.strip() or reply.tool_calls) else self.empties + 1
        if self.empties >= EMPTY_REPLIES_STOP:
            return self._result(
                None, "stuck", step, f"the model gave an empty reply {self.empties} times in a row"
            )
        self.repeats = self.repeats + 1 if outcome.repeated else 0
        if outcome.repeated and self.repeats >= REPEATS_STOP[outcome.repeated]:
            detail = {
                "final": "the model kept answering before it had looked at the file",
                "failure": "the model kept sending an action that fails the same way",
                "result": "the model kept repeating an action it had already run",
            }[outcome.repeated]
            return self._result(None, "stuck", step, detail)
        return None

    def _result(self, draft: str | None, stop: StopReason, steps: int, detail: str = "") -> NodeResult:
        # The doubts of the last query go with the node however it ends: an answer written from
        # its findings after a stop (steps, budget, the model repeating the prompt's example)
        # rests on that query as a final after it would.
        return NodeResult(
            self.id, draft, stop, steps, detail, self.largest_prompt, doubts=tuple(self.left_out)
        )

    def _parse(self, reply: Reply) -> tuple[Action | ParseError, int]:
        """The action to run, and how many blocks written before it were passed over.

        A reply of several blocks is a plan written before any of its results were seen; when
        its first action repeats one already run, the first later block that does not is run
        instead (never a later final: it was written without the results before it)."""
        if reply.tool_calls:
            call = reply.tool_calls[0]
            return parse_tool_call(call.name, call.arguments, call.id), 0
        if self.table is not None:
            return to_action(reply.content, self.table), 0
        actions = list(text_actions(reply.content))
        visible_from = self.prompt.visible_from()
        for n, action in enumerate(actions):
            if not isinstance(action, Action) or (n > 0 and _answers(action)):
                break
            if action.name == "final" or not self.runner.would_refuse(action.name, action.args, visible_from):
                return action, n
        return actions[0], 0

    def _matched(self, ran: str, observation: str, table: dict[str, Any]) -> Matched | None:
        """A typed count that kept no row or every row of the table (rlm.run.typed.matched)."""
        filters = counted_filters(ran, table)
        if not filters:
            return None
        return matched(filters, shown_count(observation), table.get("rows"), self.runner.counts)

    def _with_conditions(
        self, action: Action | ParseError, content: str
    ) -> tuple[Action | ParseError, str, list[str], str | None, str | None, str | None]:
        """The typed query to run, the action it was compiled from, the conditions rlm added,
        how it changed what the query computes (rlm.run.typed.measure), if it did, the
        lengths of time it made seconds (rlm.run.typed.seconds), and the first of two steps it
        ran to keep the query to the key found (rlm.run.typed.firststep), if any.

        The conditions the question names that the model's query leaves out are added once
        (rlm.run.typed.conditions), and the measure its words ask for taken once: the same
        action sent again after that runs as written, but right after a refused final."""
        assert self.table is not None
        try:
            asked = json.dumps(read_json(content), sort_keys=True)
        except Problem:
            return action, content, [], None, None, None
        # Sent again, an action rlm amended runs as written: the model's way to undo rlm's change.
        # Not right after a refused final: a small model sends its last query again then, told to
        # find the value asked, and the query as written was a ranking of other rows. It is run
        # as rlm ran it before (a repeat, which the runner answers with what it showed), not
        # amended anew: a first step is run once, and a query without it is of every row.
        if asked in self.amended:
            return (
                (*self.amended[asked], [], None, None, None)
                if self.look_again
                else (action, content, [], None, None, None)
            )
        amended = with_stated_in_place(self.question, content, self.table, self.runner.holds_text, self.found)
        text, added = (json.dumps(amended[0], ensure_ascii=False), amended[1]) if amended else (content, [])
        # A value named by one of its words, where the lines say the word names its rows.
        worded = onto_word_of_value(self.question, text, self.table, self.runner.counts)
        if worded is not None:
            text, added = json.dumps(worded[0], ensure_ascii=False), [*added, worded[1]]
        measured = with_asked_measure(self.question, text, self.table)
        changed = None
        if measured is not None:
            text, changed = json.dumps(measured[0], ensure_ascii=False), measured[1]
            # The query measured is another (a ranking of the column asked, not of the one the
            # question states a value of): the conditions it now leaves out are added too.
            again = with_question_conditions(self.question, text, self.table, self.runner.holds_text)
            if again is not None:
                text, added = json.dumps(again[0], ensure_ascii=False), [*added, *again[1]]
        seconds = in_seconds(self.question, text, self.table)
        timed = None
        if seconds is not None:
            text, timed = json.dumps(seconds[0], ensure_ascii=False), seconds[1]
        # A key no kept row fills, where the question's quoted line reads it: run on that value.
        filled = onto_filled_field(text, self.table, self.runner.counts)
        if filled is not None:
            text, changed = (
                json.dumps(filled[0], ensure_ascii=False),
                "; ".join(filter(None, [changed, filled[1]])),
            )
        # The first of two steps, where the query skips it: rlm runs the ranking and keeps to its key.
        stepped = None
        step = self._first_step() if self.two_steps and not self.stepped else None
        onto_step = onto_first_step(self.question, text, step, self.table) if step is not None else None
        if step is not None and onto_step is not None:
            text, stepped = json.dumps(onto_step[0], ensure_ascii=False), onto_step[1]
            self.found.add(str(step.value))
        if not added and measured is None and seconds is None and filled is None and stepped is None:
            return action, content, [], None, None, None
        query = to_action(text, self.table)
        if isinstance(query, ParseError):  # a filter the table cannot take: run as sent
            return action, content, [], None, None, None
        self.amended[asked] = (query, text)
        return query, text, added, changed, timed, stepped

    def _first_step(self) -> FirstStep | None:
        """The first of the question's two steps, run once a node (rlm.run.typed.firststep)."""
        if self.first_step_run:
            return self.first_step
        self.first_step_run = True
        assert self.table is not None
        self.first_step = first_step(
            self.question, self.table, self.runner.holds_text, self.runner.first_rows
        )
        return self.first_step

    # -- actions --------------------------------------------------------------
    def _act(self, action: Action | ParseError, step: int) -> Outcome:
        if isinstance(action, ParseError):
            # The same fault again is a failure repeated (REPEATS_STOP): a model sent one
            # invalid action 18 times, each refused alike, until its time ran out.
            again = action.message == self.unusable
            self.unusable = action.message
            return Outcome(
                f"Your reply could not be used: {action.message}.",
                ok=False,
                repeated="failure" if again else None,
            )
        self.unusable = ""
        name, args = action.name, action.args
        if name == "final":
            if not self.runner.observed:
                refused = prompts.final_refused(typed=self.table is not None)
                return Outcome(refused, ok=False, repeated="final")
            if (refused_kind := self._wrong_kind(args["answer"])) is not None:
                return Outcome(refused_kind, ok=False)
            if self.protocol == "typed" and (off := self._answer_doubt(args["answer"])):
                self.left_out.append(kind_doubt(off[1]))  # refused once already: taken, in doubt
            answer = args["answer"]
            # A value copied with an end character lost (a path's `/`) is written as shown.
            shown = as_shown(answer, set(self.shown_order)) if self.protocol == "typed" else None
            recorded = "final answer recorded"
            if shown is not None:
                answer, recorded = shown, f"{recorded}, its values as the rows write them: {shown}"
            self.host.add_finding(answer, "final_draft", self.id, step, topic="final_draft")
            return Outcome(recorded, final=answer)
        self.look_again = False  # an action after a refused final: a final may follow it
        visible_from = self.prompt.visible_from()
        return self.runner.act(name, args, step, visible_from=visible_from, subcall=self._subcall)

    def _wrong_kind(self, answer: str) -> str | None:
        """The refusal of a typed final not of the kind the question asks for (rlm.run.answer_kind),
        once a node: a final after one more action is taken, and the run's answer is in doubt if
        it still does not fit. A typed final is the answer's value; a text or tool-call final is a
        draft ("done", "see F2") the synthesis writes the value from, so it is not refused."""
        if self.protocol != "typed" or self.kind_refused:  # elsewhere the synthesis writes the value
            return None
        asked = self.asked
        wrong = misfit(asked, answer) if asked is not None else None
        timed = unasked_time(self.question, answer) if wrong is None else None
        off = self._answer_doubt(answer) if wrong is None and timed is None else None
        if wrong is None and timed is None and off is None and echoed(self.question, answer) is None:
            return None
        self.kind_refused = self.look_again = True
        again = " Run one more action to find the value asked; a final after it is taken as it is."
        # The model's answer is not quoted back: a copied template would then be in its prompt.
        if timed is not None:
            return "final refused: your answer is a date or time, and the question asks about none." + again
        if off is not None:
            return _REFUSED[off[0]] + self._value_to_copy(off[0], answer) + again
        if asked is None or wrong is None:
            return (
                "final refused: your answer is a value the question itself states, not one it asks for."
                + again
            )
        where = columns_of_kind(asked.kind, self.table)
        look = f" The columns holding such values: {', '.join(where)}." if where else ""
        return f"final refused: the question asks for {asked.kind} ({asked.words!r}), and your answer holds none.{look}{again}"

    def _value_to_copy(self, which: str, answer: str) -> str:
        """The value a refusal (_REFUSED[which]) names for the model to copy, as a sentence; "" where
        none is known. Told only "the first row", the model sent its ranking again and answered
        as before."""
        if which == "miscopied":
            near = ", ".join(repr(c) for c in miscopied(answer, self.shown_order, self.seen)[:3])
            return f" The rows write, close to it: {near}."
        if which == "whether" and self.last_count is not None:
            return f" Your count is {self.last_count:,}."
        if which in ("lower", "lower_fewest") and self.ranked:
            return f" The first row is {self.ranked[0]!r}."
        given = answer.strip().replace(",", "")
        counted = next((k for k, m in self.measured if m.replace(",", "") == given), None)
        if which == "counted" and counted is not None:
            return f" That row's value is {counted!r}."
        if which == "early" and (found := self.found_filter) is not None:
            return (
                f" The first row of your ranking is {found['column']} = {found['value']!r}: "
                f'add {json.dumps(found)} to the "where" of that query.'
            )
        return ""

    def _answer_doubt(self, answer: str) -> tuple[str, str] | None:
        """(which, why) a final does not answer as the question asks, if it does not (_REFUSED
        names each): a shown value miscopied, a yes or no its own count denies, a lower row of a
        ranking where the most (fewest) is asked, a row's count where its value is, part of a
        list, the first of two steps only, or the first row of a ranking where no most is asked."""
        checks: tuple[tuple[str, Callable[[], str | None]], ...] = (
            (
                "miscopied",
                lambda: (
                    "the answer is no value the results show, only close to one"
                    if miscopied(answer, self.shown_order, self.seen)
                    else None
                ),
            ),
            ("whether", lambda: count_contradicted(self.question, answer, self.last_count)),
            ("lower", lambda: None if self.ranked_fewest else off_top(self.question, answer, self.ranked)),
            (
                "lower_fewest",
                lambda: (
                    off_top(self.question, answer, self.ranked, fewest=True) if self.ranked_fewest else None
                ),
            ),
            ("counted", lambda: measure_for_key(self.question, answer, self.measured)),
            ("short", lambda: list_left_short(self.question, answer, self.measured, self.in_full)),
            ("early", self._one_step_short),
            ("unasked", lambda: unasked_top(self.question, answer, self._keys_past_the_cut())),
        )
        return next(((which, why) for which, check in checks if (why := check()) is not None), None)

    def _keys_past_the_cut(self) -> list[str]:
        """The keys of the last ranking; where its LIMIT cut it to one row, its first two, run
        again once (a small model asks for the top 1, which says nothing of whether it is alone)."""
        if self.cut_ranking is None or self.table is None:
            return self.shown_keys
        cut, self.cut_ranking = self.cut_ranking, None
        try:
            query = compile_sql({**read_json(cut), "k": 2}, self.table)
        except (ValueError, Problem):
            return self.shown_keys
        rows = self.runner.first_rows(query, limit=2)
        self.shown_keys = [r[0] for r in rows if r] if rows else self.shown_keys
        if cut in self.shown_of:  # what that query showed, as a repeat of it brings back
            doubts, measured, in_full, _ = self.shown_of[cut]
            self.shown_of[cut] = (doubts, measured, in_full, self.shown_keys)
        return self.shown_keys

    def _one_step_short(self) -> str | None:
        """Why a final is early: the question asks in two steps, and no query filtered on a value
        an earlier one found; None otherwise."""
        if not self.two_steps or self.stepped:
            return None
        return (
            "the question asks in two steps (find one value, then ask about it), and no query asked "
            "about a value an earlier one found"
        )

    def _asker(self, step: int) -> Asker:
        return Asker(self.id, self.depth, self.scope, step)

    def _subcall(self, name: str, args: dict[str, Any], step: int) -> str:
        """llm_query or partition_map asked for as the step's action."""
        if name == "llm_query":
            return self.host.llm_query(self._asker(step), args)
        partition = self.host.partition_map(self._asker(step), args)
        var = str(args.get("result_var") or "results")
        try:
            sandbox = self.runner.ready_sandbox()
        except (WorkerLost, OSError):
            sandbox = None  # it never started: the node ends at its next action
        if sandbox is not None:  # the answers are the code's too, in the variable named
            sandbox.request("set", timeout=30, name=var, value=partition.results)
        return partition.observation(var)

    def _bridge(self, name: str, args: dict[str, Any]) -> Any:
        """A call made by code running in the worker, recorded so `replay --verify` can serve it.

        It belongs to the step whose cell is running, whatever turns the prompt dropped."""
        asker = self._asker(self.step)
        shown = {k: (preview(v, 200) if k == "text" and isinstance(v, str) else v) for k, v in args.items()}
        record: BridgeCallRecord = {"node": self.id, "step": asker.step, "name": name, "args": shown}
        try:
            if name == "llm_query":
                result: Any = self.host.llm_query(asker, args)
            elif name == "partition_map":
                result = self.host.partition_map(asker, args).results
            elif name == "recall":
                result = self.prompt.recall(str(args.get("ref") or ""))
            else:
                raise RlmError(f"{name} is not available")
        except RlmError as exc:
            self.host.record_bridge_call({**record, "error": exc.message})
            raise
        self.host.record_bridge_call({**record, "result": result})
        return result


# How much of what a node was shown a final is looked for in (miscopied): its recent outputs.
_SEEN_CHARS = 200_000

# What a typed final is refused with, by why it does not answer as asked (Node._answer_doubt).
_REFUSED = {
    "miscopied": "final refused: your answer is no value your results show: copy the value exactly as the "
    "rows write it.",
    "whether": "final refused: the question asks whether any rows are so, and your yes or no says other "
    "than your own count of them.",
    "lower": "final refused: the question asks for the most, and your answer is not the first row of "
    "your ranking (the first row is the most).",
    "lower_fewest": "final refused: the question asks for the fewest, and your answer is not the first row "
    "of your ranking, fewest first (the first row is the fewest).",
    "counted": "final refused: your answer is the count (or total) your ranking gives a row, and the "
    "question asks which value: that is the row's first column.",
    "short": "final refused: the question asks for a list, and your answer leaves out values your "
    "ranking shows: list every one it asks for.",
    "unasked": "final refused: your answer is the first row of a ranking, and the question asks for no "
    "most: the first row is only the commonest of the rows your query kept. Filter on what the question "
    "says of the one it asks about, so that your query keeps its rows alone.",
    "early": "final refused: the question asks in two steps: first find the one value it names, then "
    "run a query of that value's rows for what it asks about it.",
}


def _answers(action: Action) -> bool:
    """Whether the action gives an answer: final, or a cell that calls final()."""
    code = str(action.args.get("code", "")) if action.name == "execute" else ""
    return action.name == "final" or re.search(r"\bfinal\s*\(", code) is not None
