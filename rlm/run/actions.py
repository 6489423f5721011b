"""The action vocabulary and the parser from a model's turn to one Action.

The names and arguments are a public contract with models and with recorded
traces: extend with optional arguments, never rename. Parsing never raises:
whatever the model wrote becomes an Action or a ParseError whose message is
shown to the model so it can correct itself.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rlm.trace.schema import ActionRecord

REQUIRED = object()

# name -> ordered (argument, type, default); REQUIRED marks a required argument.
ACTION_SPECS: dict[str, list[tuple[str, type, Any]]] = {
    "peek": [("start", int, REQUIRED), ("length", int, 20), ("unit", str, "lines")],
    "grep": [("pattern", str, REQUIRED), ("max_matches", int, 50), ("ignore_case", bool, False)],
    "execute": [("code", str, REQUIRED)],
    "llm_query": [
        ("question", str, REQUIRED),
        ("start_line", int, None),
        ("end_line", int, None),
        ("text", str, None),
    ],
    "partition_map": [
        ("question", str, REQUIRED),
        ("chunk_lines", int, None),
        ("chunk_chars", int, None),
        ("result_var", str, "results"),
    ],
    "final": [("answer", str, REQUIRED)],
}
ACTION_NAMES = tuple(ACTION_SPECS)
GREP_MAX_MATCHES = 500

_DESCRIPTIONS = {
    "peek": "Show part of the file. unit='lines': lines start..start+length-1 (1-based, like grep -n), each "
    "with its number. unit='chars': `length` characters from character offset `start` (0-based), for files "
    "with very long lines.",
    "grep": "Search the file with a Python `re` regular expression. Shows matching lines with their 1-based "
    f"numbers, at most max_matches (default 50, maximum {GREP_MAX_MATCHES}), and always the total number of "
    "matching lines.",
    "execute": "Run Python in a persistent sandbox where `context` (the whole file, str) and `context_lines` "
    "(read-only list of lines without line endings; context_lines[0] is line 1) are defined. Only what the "
    "code prints, and the value of a last bare expression, is shown. Variables persist between calls. "
    "peek, grep, llm_query, partition_map, note(text), recall(id) and final(answer) are callable inside the code.",
    "llm_query": "Ask a helper model a question about lines start_line..end_line of the file, or about a string "
    "`text` you built. Returns its answer. Use it for what needs reading rather than computing.",
    "partition_map": "Ask a helper model the same question about every chunk of the file (chunk_lines lines or "
    "chunk_chars characters each). Returns the answers in chunk order; they are also stored in the sandbox "
    "variable named by result_var (default `results`) for you to combine with execute.",
    "final": "Give the final answer to the question and stop. Only after you have examined the file.",
}

_ARG_DOCS = {
    ("peek", "start"): "first line (1-based) or character offset (0-based) to show",
    ("peek", "length"): "number of lines or characters to show",
    ("peek", "unit"): "'lines' (default) or 'chars'",
    ("grep", "pattern"): "Python re pattern",
    ("grep", "max_matches"): f"matching lines to show, default 50, at most {GREP_MAX_MATCHES}",
    ("grep", "ignore_case"): "case-insensitive search",
    ("execute", "code"): "Python source to run",
    ("llm_query", "question"): "what the helper should answer",
    ("llm_query", "start_line"): "first line of the slice (1-based)",
    ("llm_query", "end_line"): "last line of the slice (inclusive)",
    ("llm_query", "text"): "a string to ask about instead of a line range",
    ("partition_map", "question"): "question asked of every chunk",
    ("partition_map", "chunk_lines"): "lines per chunk",
    ("partition_map", "chunk_chars"): "characters per chunk (split on line boundaries)",
    ("partition_map", "result_var"): "sandbox variable that receives the list of answers",
    ("final", "answer"): "the answer, with the exact figures you established",
}

_JSON_TYPES = {int: "integer", str: "string", bool: "boolean"}


@dataclass
class Action:
    name: str
    args: dict[str, Any]
    call_id: str | None = None
    # Where the action's part of a text reply starts and ends (the text before it included).
    source_start: int = 0
    source_end: int | None = None

    def to_dict(self) -> ActionRecord:
        return {"name": self.name, "args": self.args}


@dataclass
class ParseError:
    message: str
    call_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def tool_schemas() -> list[dict[str, Any]]:
    """The actions as OpenAI-style function tools."""
    tools = []
    for name, spec in ACTION_SPECS.items():
        props: dict[str, Any] = {}
        required = []
        for arg, typ, default in spec:
            prop: dict[str, Any] = {"type": _JSON_TYPES[typ], "description": _ARG_DOCS[(name, arg)]}
            if name == "peek" and arg == "unit":
                prop["enum"] = ["lines", "chars"]
            props[arg] = prop
            if default is REQUIRED:
                required.append(arg)
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": _DESCRIPTIONS[name],
                    "parameters": {"type": "object", "properties": props, "required": required},
                },
            }
        )
    return tools


def _coerce(name: str, arg: str, typ: type, value: Any) -> tuple[bool, Any]:
    if value is None:
        return True, None
    if typ is bool:
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return True, value.strip().lower() in ("true", "1", "yes")
        if isinstance(value, int):
            return True, bool(value)
        return False, None
    if typ is int:
        if isinstance(value, bool):
            return False, None
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return True, int(value)
        return False, None
    if typ is str:
        if isinstance(value, str):
            return True, value
        if arg == "answer" and isinstance(value, int | float | list | dict | bool):
            return True, value if isinstance(value, str) else json.dumps(value)
        return False, None
    return True, value


def validate(
    name: str, args: Any, positional: list[Any] | None = None, call_id: str | None = None
) -> Action | ParseError:
    """Check an action's name and arguments; fill in defaults."""
    if name not in ACTION_SPECS:
        return ParseError(f"unknown action `{name}`; the actions are: {', '.join(ACTION_NAMES)}", call_id)
    if not isinstance(args, dict):
        return ParseError(f"the arguments of `{name}` must be an object of named arguments", call_id)
    spec = ACTION_SPECS[name]
    names = [a for a, _, _ in spec]
    args = dict(args)
    positional = positional or []
    if len(positional) > len(spec):
        return ParseError(f"`{name}` takes at most {len(spec)} arguments ({', '.join(names)})", call_id)
    for (arg, _, _), value in zip(spec, positional, strict=False):
        if arg in args:
            return ParseError(f"argument `{arg}` of `{name}` given twice", call_id)
        args[arg] = value
    unknown = [a for a in args if a not in names]
    if unknown:
        return ParseError(
            f"unknown argument `{unknown[0]}` for `{name}`; it takes: {', '.join(names)}", call_id
        )
    out: dict[str, Any] = {}
    for arg, typ, default in spec:
        if arg not in args or args[arg] is None:
            if default is REQUIRED:
                return ParseError(f"missing required argument `{arg}` for `{name}`", call_id)
            out[arg] = default
            continue
        ok, value = _coerce(name, arg, typ, args[arg])
        if not ok:
            return ParseError(
                f"argument `{arg}` of `{name}` must be {_JSON_TYPES[typ]}, got {type(args[arg]).__name__}",
                call_id,
            )
        out[arg] = value
    return _check_values(Action(name, out, call_id))


def _check_values(action: Action) -> Action | ParseError:
    a = action.args
    if action.name == "peek":
        if a["unit"] not in ("lines", "chars"):
            return ParseError("`unit` of `peek` must be 'lines' or 'chars'", action.call_id)
        if a["length"] < 1:
            return ParseError("`length` of `peek` must be at least 1", action.call_id)
    elif action.name == "grep":
        if not a["pattern"]:
            return ParseError("`pattern` of `grep` must not be empty", action.call_id)
        a["max_matches"] = max(1, min(GREP_MAX_MATCHES, a["max_matches"]))
    elif action.name == "execute" and not a["code"].strip():
        return ParseError("`code` of `execute` is empty", action.call_id)
    elif action.name == "final" and not a["answer"].strip():
        return ParseError("`final` needs a non-empty answer", action.call_id)
    elif action.name == "partition_map" and a["chunk_lines"] is not None and a["chunk_chars"] is not None:
        return ParseError("give `chunk_lines` or `chunk_chars` to `partition_map`, not both", action.call_id)
    return action


def parse_tool_call(name: str, arguments: str, call_id: str | None = None) -> Action | ParseError:
    """A native tool call: JSON arguments, as the provider returned them."""
    text = (arguments or "").strip() or "{}"
    try:
        args = json.loads(text)
    except json.JSONDecodeError as exc:
        return ParseError(
            f"the arguments of `{name}` are not valid JSON ({exc.msg} at character {exc.pos})", call_id
        )
    return validate(name, args, call_id=call_id)


# ---------------------------------------------------------------------------
# Text protocol: one fenced block per turn, or an action line.

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.S | re.M)
_TOOL_TAG = re.compile(r"<tool_call>\s*(\{.*?\})\s*(?:</tool_call>|\Z)", re.S)
_CALL_LINE = re.compile(r"^[ \t>*`]*(?:ACTION:\s*)?(" + "|".join(ACTION_NAMES) + r"|FINAL)\s*\(", re.M | re.I)
_FINAL_LINE = re.compile(r"^[ \t>*]*FINAL(?:[ _]ANSWER)?\s*:\s*(.+)", re.M | re.S | re.I)
_CODE_LANGS = {"", "python", "py", "python3", "repl", "ipython", "code"}


def _literal_call(source: str) -> tuple[str, list[Any], dict[str, Any]] | None:
    """`grep("x", max_matches=5)` -> ("grep", ["x"], {"max_matches": 5}) when every argument is a literal."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        return None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        return None
    name = call.func.id.lower() if call.func.id.upper() == "FINAL" else call.func.id
    if name not in ACTION_SPECS:
        return None
    try:
        positional = [ast.literal_eval(a) for a in call.args]
        keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (ValueError, SyntaxError, TypeError):
        return None
    if len(keywords) != len(call.keywords):
        return None
    return name, positional, keywords


def _from_json_object(obj: Any) -> Action | ParseError | None:
    if not isinstance(obj, dict):
        return None
    name = obj.get("name") or obj.get("action") or obj.get("tool")
    if not isinstance(name, str):
        return None
    args = obj.get("arguments", obj.get("args", obj.get("parameters")))
    if args is None:
        args = {k: v for k, v in obj.items() if k not in ("name", "action", "tool")}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return ParseError(f"the arguments of `{name}` are not valid JSON")
    return validate(name, args)


def _from_block(lang: str, body: str) -> Action | ParseError:
    lang = lang.lower()
    if lang == "json" or (lang == "" and body.lstrip().startswith("{")):
        try:
            parsed = _from_json_object(json.loads(body))
        except json.JSONDecodeError:
            parsed = None
        if parsed is not None:
            return parsed
    call = _literal_call(body)
    if call is not None:
        name, positional, keywords = call
        return validate(name, keywords, positional)
    if lang in _CODE_LANGS or lang == "json":
        return validate("execute", {"code": body})
    return ParseError(f"a ```{lang} block is not an action; use a ```python block")


def _call_at(text: str, start: int) -> tuple[str, list[Any], dict[str, Any], int] | str:
    """Parse the call that starts at `start`, trying ever longer spans of lines; also where it ends."""
    lines = text[start:].split("\n")
    consumed = start
    for end in range(1, len(lines) + 1):
        candidate = "\n".join(lines[:end]).strip().strip("`>*").strip()
        candidate = re.sub(r"^ACTION:\s*", "", candidate, flags=re.I)
        parsed = _literal_call(candidate)
        consumed += len(lines[end - 1]) + 1
        if parsed is not None:
            return (*parsed, min(consumed, len(text)))
    # FINAL(free text) as in the original RLM prompts: take the text inside the parentheses.
    first = lines[0].strip().strip("`>*").strip()
    m = re.match(r"FINAL\s*\((.*)\)\s*$", first, re.I | re.S)
    if m:
        return "final", [m.group(1).strip().strip("\"'")], {}, min(start + len(lines[0]) + 1, len(text))
    return first


def parse_text(content: str | None) -> Action | ParseError:
    """The first action in a text reply."""
    return next(text_actions(content, limit=1))


def text_actions(content: str | None, limit: int = 8) -> Iterator[Action | ParseError]:
    """The actions of a text reply in the order written: the first, then each one written
    after it, up to `limit` in all. Small models often write a whole plan of blocks in one
    reply and write it again next turn; the node takes a later block when an earlier one repeats."""
    text = content or ""
    offset = 0
    for n in range(limit):
        result, end = _parse_text(text[offset:])
        if not isinstance(result, Action) or end is None:
            if n == 0:
                yield result
            return
        result.source_start, result.source_end = offset, offset + end
        yield result
        offset += end


def _parse_text(content: str | None) -> tuple[Action | ParseError, int | None]:
    text = content or ""
    if not text.strip():
        return ParseError("your reply was empty; reply with exactly one action"), None
    candidates: list[tuple[int, str, Any]] = []
    if m := _FENCE.search(text):
        candidates.append((m.start(), "fence", m))
    if m := _TOOL_TAG.search(text):
        candidates.append((m.start(), "tag", m))
    if m := _CALL_LINE.search(text):
        candidates.append((m.start(), "call", m))
    if m := _FINAL_LINE.search(text):
        candidates.append((m.start(), "final", m))
    if not candidates:
        return ParseError(
            "no action found in your reply; reply with exactly one ```python block: code, or a "
            'single call such as grep("ERROR"); once a printed result answers the question, final(n) '
            "with the variable that holds it"
        ), None
    _, kind, m = min(candidates, key=lambda c: c[0])
    if kind == "fence":
        return _from_block(m.group(1), m.group(2)), m.end()
    if kind == "tag":
        try:
            parsed = _from_json_object(json.loads(m.group(1)))
        except json.JSONDecodeError as exc:
            return ParseError(f"the <tool_call> is not valid JSON ({exc.msg})"), None
        return parsed or ParseError("the <tool_call> needs a `name` and `arguments`"), m.end()
    if kind == "final":
        return validate("final", {"answer": m.group(1).strip()}), len(text)
    call = _call_at(text, m.start())
    if isinstance(call, str):
        return ParseError(
            f"could not read the call `{call[:80]}`: arguments must be literals (strings, numbers); "
            "to use variables, put the code in a ```python block"
        ), None
    name, positional, keywords, end = call
    return validate(name, keywords, positional), end
