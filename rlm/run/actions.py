"""The parser from a model's turn to one Action, checked against the declared vocabulary.

The actions, their arguments, types and defaults are declared once in rlm.run.actionspec;
this module reads a reply (a native tool call, a fenced block, an action line) and checks
and fills in its arguments from that declaration. Parsing never raises: whatever the model
wrote becomes an Action or a ParseError whose message is shown to the model so it can
correct itself.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rlm.run.actionspec import ACTION_NAMES, ACTIONS, Arg, Spec
from rlm.run.actionspec import tool_schemas as tool_schemas
from rlm.trace.schema import ActionRecord


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


def _coerce(arg: Arg, value: Any) -> tuple[bool, Any]:
    """`value` as the argument's type, where a model's way of writing it is unambiguous
    ("5" for 5, "true" for True, 5.0 for 5)."""
    if value is None:
        return True, None
    if arg.kind is bool:
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return True, value.strip().lower() in ("true", "1", "yes")
        if isinstance(value, int):
            return True, bool(value)
        return False, None
    if arg.kind is int:
        if isinstance(value, bool):
            return False, None
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return True, int(value)
        return False, None
    if arg.kind is str:
        if isinstance(value, str):
            return True, value
        if arg.any_json and isinstance(value, int | float | list | dict | bool):
            return True, json.dumps(value)
        return False, None
    return True, value


def validate(
    name: str, args: Any, positional: list[Any] | None = None, call_id: str | None = None
) -> Action | ParseError:
    """Check an action's name and arguments; fill in defaults."""
    if name not in ACTIONS:
        return ParseError(f"unknown action `{name}`; the actions are: {', '.join(ACTION_NAMES)}", call_id)
    if not isinstance(args, dict):
        return ParseError(f"the arguments of `{name}` must be an object of named arguments", call_id)
    spec = ACTIONS[name]
    names = spec.arg_names()
    args = dict(args)
    positional = positional or []
    if len(positional) > len(spec.args):
        return ParseError(f"`{name}` takes at most {len(spec.args)} arguments ({', '.join(names)})", call_id)
    for arg, value in zip(spec.args, positional, strict=False):
        if arg.name in args:
            return ParseError(f"argument `{arg.name}` of `{name}` given twice", call_id)
        args[arg.name] = value
    unknown = [a for a in args if a not in names]
    if unknown:
        return ParseError(
            f"unknown argument `{unknown[0]}` for `{name}`; it takes: {', '.join(names)}", call_id
        )
    out: dict[str, Any] = {}
    for arg in spec.args:
        if arg.name not in args or args[arg.name] is None:
            if arg.required:
                return ParseError(f"missing required argument `{arg.name}` for `{name}`", call_id)
            out[arg.name] = arg.default
            continue
        ok, value = _coerce(arg, args[arg.name])
        if not ok:
            return ParseError(
                f"argument `{arg.name}` of `{name}` must be {arg.json_type}, got {type(args[arg.name]).__name__}",
                call_id,
            )
        out[arg.name] = value
    problem = _check_values(spec, out)
    return ParseError(problem, call_id) if problem else Action(name, out, call_id)


def _check_values(spec: Spec, values: dict[str, Any]) -> str | None:
    """What is wrong with the values, as the spec's bounds say; clamps numbers in place.
    Choices are checked before bounds, bounds before emptiness: the first problem is the one told."""
    present = [(a, values[a.name]) for a in spec.args if values[a.name] is not None]
    for arg, value in present:
        if arg.choices and value not in arg.choices:
            allowed = " or ".join(repr(c) for c in arg.choices)
            return f"`{arg.name}` of `{spec.name}` must be {allowed}"
    for arg, value in present:
        if arg.at_least is not None and value < arg.at_least:
            return f"`{arg.name}` of `{spec.name}` must be at least {arg.at_least}"
    for arg, value in present:
        if arg.if_empty and not (value.strip() if arg.blank_is_empty else value):
            return arg.if_empty
    for arg, value in present:
        if arg.clamp is not None:
            values[arg.name] = max(arg.clamp[0], min(arg.clamp[1], value))
    if spec.exclusive is not None:
        first, second = spec.exclusive
        if values[first] is not None and values[second] is not None:
            return f"give `{first}` or `{second}` to `{spec.name}`, not both"
    return None


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
    if name not in ACTIONS:
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
