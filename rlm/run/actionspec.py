"""The action vocabulary, declared once: every action and sandbox function, its arguments,
their types, defaults and help.

Generated from `SPECS`: the tool schemas of the tools protocol (`tool_schemas`), the list of
actions in the system prompt (`prompt_lines`, rlm.run.prompts), the checking and filling-in
of a parsed call's arguments (rlm.run.actions.validate), the README's actions table
(scripts/readme_tables.py); tests/test_action_spec.py holds the sandbox worker's functions to
the same signatures. Adding an optional argument is one `Arg` here, plus what it does.

The names and arguments are a public contract with models and with recorded traces: extend
with optional arguments, never rename.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rlm.sandbox.worker.formatting import LINE_DISPLAY_CHARS
from rlm.sandbox.worker.sql_result import MAX_RESULT_CELLS


class _Required:
    """The default of an argument that has none."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
GREP_MAX_MATCHES = 500
_JSON_TYPES = {int: "integer", str: "string", bool: "boolean"}


@dataclass(frozen=True)
class Arg:
    """One argument: its name, type (int, str or bool), default (REQUIRED: none) and help,
    and how a value the model gives is checked."""

    name: str
    kind: type
    help: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    at_least: int | None = None  # a smaller number is refused
    clamp: tuple[int, int] | None = None  # a number outside is brought within, silently
    if_empty: str = ""  # an empty text is refused with this message
    blank_is_empty: bool = True  # spaces alone count as empty (not for a regex, where " " is one)
    any_json: bool = False  # a number, list or object given for the text is taken as its JSON
    keyword: bool = True  # code may pass it by name (note() takes its text as print does)
    in_prompt: bool = True  # shown in the system prompt's signature (False: the tools' schema only)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def json_type(self) -> str:
        return _JSON_TYPES[self.kind]


@dataclass(frozen=True)
class Spec:
    """An action (one turn of the model) or a function model code calls, or both."""

    name: str
    purpose: str  # the tool's description (tools protocol)
    args: tuple[Arg, ...]
    # The system prompt's line after the signature; "" leaves it out of the list. It may name
    # the values system_prompt fills in: {modules}, {seconds:g}, {memory_mb:,}.
    prompt: str = ""
    readme: str = ""  # the README's "what it does", when the purpose is worded for a model
    action: bool = True  # a tool, and an action of the text protocol
    in_code: bool = True  # a function in the sandbox's namespace too
    exclusive: tuple[str, str] | None = None  # at most one of these two arguments

    def arg_names(self) -> list[str]:
        return [a.name for a in self.args]


SPECS: tuple[Spec, ...] = (
    Spec(
        "peek",
        "Show part of the file. unit='lines': lines start..start+length-1 (1-based, like grep -n), each "
        "with its number. unit='chars': `length` characters from character offset `start` (0-based), for "
        "files with very long lines.",
        (
            Arg("start", int, "first line (1-based) or character offset (0-based) to show"),
            Arg("length", int, "number of lines or characters to show", 20, at_least=1),
            Arg("unit", str, "'lines' (default) or 'chars'", "lines", choices=("lines", "chars")),
        ),
        prompt="show lines start..start+length-1 with their numbers (1-based, as in grep -n); "
        'unit="chars" shows `length` characters from character offset `start` instead.',
        readme="lines `start … start+length−1` with their numbers (1-based, as `grep -n`); "
        '`unit="chars"` for character offsets',
    ),
    Spec(
        "grep",
        "Search the file with a Python `re` regular expression. Shows matching lines with their 1-based "
        f"numbers, at most max_matches (default 50, maximum {GREP_MAX_MATCHES}), and always the total "
        "number of matching lines.",
        (
            Arg(
                "pattern",
                str,
                "Python re pattern",
                if_empty="`pattern` of `grep` must not be empty",
                blank_is_empty=False,
            ),
            Arg(
                "max_matches",
                int,
                f"matching lines to show, default 50, at most {GREP_MAX_MATCHES}",
                50,
                clamp=(1, GREP_MAX_MATCHES),
            ),
            Arg("ignore_case", bool, "case-insensitive search", False),
        ),
        prompt="Python `re` regex; shows matching lines with their numbers (at most max_matches, up to "
        f"{GREP_MAX_MATCHES}) and the exact total count of matching lines.",
        readme=f"Python `re` search; matching lines with numbers (at most {GREP_MAX_MATCHES} shown) and "
        "the exact total",
    ),
    Spec(
        "execute",
        "Run Python in a persistent sandbox where `context` (the whole file, str) and `context_lines` "
        "(read-only list of lines without line endings; context_lines[0] is line 1) are defined. Only what "
        "the code prints, and the value of a last bare expression, is shown. Variables persist between "
        "calls. peek, grep, llm_query, partition_map, note(text), recall(id) and final(answer) are callable "
        "inside the code.",
        (Arg("code", str, "Python source to run", if_empty="`code` of `execute` is empty"),),
        prompt="run Python in a persistent sandbox (variables survive between turns). Only what you "
        "print(), and the value of a last bare expression, is shown. Modules you may import: {modules}. "
        "No files, no network. Each cell may run {seconds:g} s and use about {memory_mb:,} MB beyond the "
        "file: enough for one full pass over the file; slices of context_lines are views and cost "
        "nothing. Inside code you can also call peek, grep (returns every matching line as (line_number, "
        f"line); len() is their exact number; printed, it shows max_matches of them, each cut at "
        f"{LINE_DISPLAY_CHARS} characters), "
        "llm_query, partition_map, note(text) to record a finding, recall(id) to see again a finding "
        "(F3), memory (M2) or earlier turn (T4) left out to save room, and final(answer).",
        readme="Python in a persistent sandbox with `context` (str) and `context_lines` (read-only list "
        "of lines, no line endings); prints and the last expression are shown",
        in_code=False,
    ),
    Spec(
        "llm_query",
        "Ask a helper model a question about lines start_line..end_line of the file, or about a string "
        "`text` you built. Returns its answer. Use it for what needs reading rather than computing.",
        (
            Arg("question", str, "what the helper should answer"),
            Arg("start_line", int, "first line of the slice (1-based)", None),
            Arg("end_line", int, "last line of the slice (inclusive)", None),
            Arg("text", str, "a string to ask about instead of a line range", None),
        ),
        prompt="a helper model answers a question about lines start_line..end_line, or about a string "
        "you built; returns its answer.",
        readme="a sub-model reads a slice and answers; a slice too big for one call becomes a child "
        "investigation one level deeper",
    ),
    Spec(
        "partition_map",
        "Ask a helper model the same question about every chunk of the file (chunk_lines lines or "
        "chunk_chars characters each). Returns the answers in chunk order; they are also stored in the "
        "sandbox variable named by result_var (default `results`) for you to combine with execute.",
        (
            Arg("question", str, "question asked of every chunk"),
            Arg("chunk_lines", int, "lines per chunk", None),
            Arg("chunk_chars", int, "characters per chunk (split on line boundaries)", None),
            # Left out of the system prompt: the line says where the answers go, and a small
            # model's prompt is kept short.
            Arg(
                "result_var",
                str,
                "sandbox variable that receives the list of answers",
                "results",
                in_prompt=False,
            ),
            Arg(
                "by",
                str,
                "'file': one chunk per input file, when several are read as one (context_files)",
                None,
                choices=("file",),
                in_prompt=False,
            ),
        ),
        prompt="the helper answers the question for every chunk of the file; returns the answers in order "
        "(also stored in the variable `results`).",
        readme="the sub-model answers for every chunk, in parallel; answers in order, also in the sandbox "
        'variable `result_var` names; `by="file"`: one chunk per input file',
        exclusive=("chunk_lines", "chunk_chars"),
    ),
    Spec(
        "sql",
        "Run a read-only DuckDB SQL query over the table `log` and return its rows.",
        (Arg("query", str, "read-only DuckDB SQL over the table `log`"),),
        prompt="a function of the sandbox, called in the code you execute (not an action of its own): a "
        "read-only DuckDB SQL query over the table `log` (line_no, line, and the fields the profile lists "
        "for this file's format); returns a list of all its row tuples, shown as a table when it is the last "
        f"expression; more than {MAX_RESULT_CELLS:,} values (rows x columns) is an error: count, group or "
        "LIMIT in SQL instead. Prefer it for counts, distinct values and group-bys: it is exact and fast on the "
        "whole file.",
        action=False,
    ),
    Spec(
        "note",
        "Record a finding in the investigation's own words.",
        # The worker takes its parts as print does: note("total:", n), and note() notes nothing.
        (Arg("text", str, "the finding", "", keyword=False),),
        action=False,
    ),
    Spec(
        "recall",
        "Show again a finding (F3), memory (M2) or earlier turn (T4) left out of the prompt to save room.",
        (Arg("ref", str, "the id: F3, M2 or T4"),),
        action=False,
    ),
    Spec(
        "final",
        "Give the final answer to the question and stop. Only after you have examined the file.",
        (
            Arg(
                "answer",
                str,
                "the answer, with the exact figures you established",
                if_empty="`final` needs a non-empty answer",
                any_json=True,
            ),
        ),
        prompt="give your answer and stop. Allowed only after you have looked at the data.",
        readme="the model's draft; refused before the model has looked at anything",
    ),
)

ACTIONS: dict[str, Spec] = {s.name: s for s in SPECS if s.action}
IN_CODE: dict[str, Spec] = {s.name: s for s in SPECS if s.in_code}
ACTION_NAMES = tuple(ACTIONS)


def _literal(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def signature(spec: Spec, *, for_prompt: bool = False) -> str:
    """`peek(start, length=20, unit="lines")`: as the prompt and the README write a call."""
    shown = [a for a in spec.args if a.in_prompt or not for_prompt]
    parts = [a.name if a.required else f"{a.name}={_literal(a.default)}" for a in shown]
    return f"{spec.name}({', '.join(parts)})"


def prompt_lines() -> str:
    """The system prompt's list of actions and functions, one line each, in declaration order."""
    return "\n".join(f"- {signature(s, for_prompt=True)}: {s.prompt}" for s in SPECS if s.prompt)


def tools_sentence() -> str:
    """The tools protocol's one rule: one tool a turn, named."""
    names = list(ACTIONS)
    return f"Each turn call exactly one of the tools {', '.join(names[:-1])} or {names[-1]}."


def tool_schemas() -> list[dict[str, Any]]:
    """The actions as OpenAI-style function tools."""
    tools = []
    for spec in ACTIONS.values():
        props: dict[str, Any] = {}
        for arg in spec.args:
            prop: dict[str, Any] = {"type": arg.json_type, "description": arg.help}
            if arg.choices:
                prop["enum"] = list(arg.choices)
            props[arg.name] = prop
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.purpose,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": [a.name for a in spec.args if a.required],
                    },
                },
            }
        )
    return tools
