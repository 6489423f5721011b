"""Typed actions: one JSON action a turn, held to a schema built from the input's table.

Small models write poor free Python; instead they fill one JSON object a turn (count, top,
group, rows, grep, peek, final, ...) whose columns and values are the table's own, and rlm
compiles it into one of the existing actions (rlm.run.actions.Action): an `execute` cell that
runs one query through the sandbox's `sql()`, a grep, a peek or a final.

    vocabulary  the ops, their fields, choices and bounds (declared once)
    columns     the table's columns an action may name: kinds, SQL, values known whole
    schema      action_schema: the JSON schema a server's grammar holds a reply to
    check       a parsed action checked against the table, problems in words for the model
    compile     compile_sql and to_action: the query, and the Action a reply asks for
    describe    describe_actions: the system prompt's lines, an example per shape
    conditions  left_out and with_conditions: what the question names that a query has no
                filter on, and the query with it added; unstated: a value a query keeps to
                that the question names in no way
    examples_given  without_examples: the question with the examples it gives blanked
    window      with_window: the time window a question states, as filters on the time column
    asked       what a question's words name: the column asked for, bounds on lines or a column
    measure     with_asked_measure: the query the question's words ask for, where another was sent
    quoted      quoted_part, with_quoted, quoted_left_out: the line a question quotes, as a filter
                on `line`;
                with_question_conditions: both kinds added, as a run adds them;
                with_stated_in_place: made-up filters give their place to them where
                the action has no room left
    steps       asks_in_two_steps: a question that asks to find one thing, then about it
    firststep   first_step and onto_first_step: the first of those steps, run by rlm where the
                model's query skips it, and the key it finds kept to
    fields      with_quoted_fields: the values a quoted line's placeholders stand for (`<host>`,
                `N`), as columns read from the raw line
    filled      onto_filled_field: a key no kept row fills, moved onto the quoted field of its kind
    as_shown    as_shown: a final's values written as the rows shown write them (a path's `/`)
    wordvalue   onto_word_of_value: a value named by one of its words, where the lines that
                write the word are its rows

Imports rlm.run.actions and actionspec (the actions it compiles to), rlm.input.tablevalues,
rlm.sandbox.worker.sql_result (how many rows a result shows) and rlm.text only.
"""

from __future__ import annotations

from rlm.run.typed.compile import compile_sql, execute_code, to_action
from rlm.run.typed.conditions import left_out, unstated, with_conditions
from rlm.run.typed.describe import describe_actions
from rlm.run.typed.quoted import (
    quoted_left_out,
    quoted_part,
    with_question_conditions,
    with_quoted,
    with_stated_in_place,
)
from rlm.run.typed.schema import action_schema

__all__ = [
    "action_schema",
    "compile_sql",
    "describe_actions",
    "execute_code",
    "left_out",
    "quoted_left_out",
    "quoted_part",
    "to_action",
    "unstated",
    "with_conditions",
    "with_question_conditions",
    "with_stated_in_place",
    "with_quoted",
]
