"""The action vocabulary is declared once (rlm.run.actionspec) and everything else follows it:
the tools' schemas, the system prompt's list, the parsing of a model's call, and the
functions model code calls in the sandbox worker.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from rlm.run import actionspec
from rlm.run.actions import Action, parse_text, parse_tool_call
from rlm.run.actionspec import ACTIONS, IN_CODE, REQUIRED, SPECS, Arg, Spec, signature, tool_schemas
from rlm.run.prompts import system_prompt

# Values a call needs where the declared default is none: a pattern that matches more lines
# than grep shows by default, a query the table answers.
SAMPLES = {("grep", "pattern"): "GET", ("sql", "query"): "SELECT count(*) FROM log", ("peek", "start"): 1}


def _sample(spec: Spec, arg: Arg) -> Any:
    if (spec.name, arg.name) in SAMPLES:
        return SAMPLES[(spec.name, arg.name)]
    if arg.default is not REQUIRED and arg.default is not None:
        return arg.default
    if arg.choices:
        return arg.choices[0]
    return {int: 1, str: "x", bool: False}[arg.kind]


@pytest.mark.parametrize("name", list(ACTIONS))
def test_a_parsed_call_gets_every_declared_default(name: str) -> None:
    spec = ACTIONS[name]
    required = {a.name: _sample(spec, a) for a in spec.args if a.required}
    expected = {a.name: required.get(a.name, a.default) for a in spec.args}
    literals = ", ".join(json.dumps(v) for v in required.values())
    text = parse_text(f"```python\n{name}({literals})\n```")
    tool = parse_tool_call(name, json.dumps(required))
    assert isinstance(text, Action) and isinstance(tool, Action), (text, tool)
    assert text.args == expected and tool.args == expected


def test_the_tools_and_the_prompt_are_the_declared_actions() -> None:
    schemas = [t["function"] for t in tool_schemas()]
    assert [s["name"] for s in schemas] == [s.name for s in SPECS if s.action]
    for schema in schemas:
        spec = ACTIONS[schema["name"]]
        assert schema["description"] == spec.purpose
        assert list(schema["parameters"]["properties"]) == spec.arg_names()
        assert schema["parameters"]["required"] == [a.name for a in spec.args if a.required]
    prompt = system_prompt("text", 4000, 30, 1024)
    listed = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert [line.split("(")[0] for line in listed] == [f"- {s.name}" for s in SPECS if s.prompt]
    tools = system_prompt("tools", 4000, 30, 1024)
    assert tools.endswith(
        "Each turn call exactly one of the tools " + ", ".join(list(ACTIONS)[:-1]) + " or final."
    )


def test_an_optional_argument_is_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """One `Arg` more in the declaration: the tool's schema, the prompt's signature and both
    parse paths (text and tool call) take it, with its default, type and bound."""
    grep = ACTIONS["grep"]
    extra = Arg("context", int, "lines shown around each match", 0, at_least=0)
    wider = replace(grep, args=(*grep.args, extra))
    monkeypatch.setitem(ACTIONS, "grep", wider)
    monkeypatch.setattr(actionspec, "SPECS", tuple(wider if s.name == "grep" else s for s in SPECS))

    schema = next(t["function"] for t in tool_schemas() if t["function"]["name"] == "grep")
    assert schema["parameters"]["properties"]["context"] == {
        "type": "integer",
        "description": "lines shown around each match",
    }
    assert "- grep(pattern, max_matches=50, ignore_case=False, context=0): " in system_prompt(
        "text", 4000, 30, 1024
    )
    for reply, context in (
        ('grep("x")', 0),
        ('grep("x", context=3)', 3),
        ('```python\ngrep("x", 9, True, 2)\n```', 2),
        ('<tool_call>{"name": "grep", "arguments": {"pattern": "x", "context": "4"}}</tool_call>', 4),
    ):
        action = parse_text(reply)
        assert isinstance(action, Action) and action.args["context"] == context, (reply, action)
    refused = parse_tool_call("grep", '{"pattern": "x", "context": -1}')
    assert refused.message == "`context` of `grep` must be at least 0"  # type: ignore[union-attr]
    wrong = parse_tool_call("grep", '{"pattern": "x", "context": "many"}')
    assert wrong.message == "argument `context` of `grep` must be integer, got str"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- the worker


@pytest.fixture(scope="module")
def worker_namespace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The functions model code sees, as the worker builds them over a small access log with
    its table: the worker the client starts (its entry module) makes the namespace, whichever
    module defines it. Calls to the parent are answered with an empty result."""
    from rlm.input.source import open_source
    from rlm.run.settings import Settings
    from rlm.run.workers import worker_spec_for

    root = tmp_path_factory.mktemp("spec")
    log = root / "access.log"
    log.write_text(
        "".join(
            f'10.0.0.{i % 7} - - [01/Mar/2026:10:00:{i % 60:02d} +0000] "GET /a{i % 5} HTTP/1.1" 200 {i}\n'
            for i in range(80)
        )
    )
    entry = importlib.import_module("rlm.sandbox.worker.main")
    with open_source(str(log), cache_dir=str(root / "cache")) as source:
        spec = asdict(worker_spec_for(source.profile, Settings()))
        replies = io.BytesIO(b'{"bridge_result": []}\n' * 1000)
        worker = entry.Worker(spec, replies, io.BytesIO())
        namespace: dict[str, Any] = worker.interpreter.protected
        yield namespace


def _functions(namespace: dict[str, Any]) -> dict[str, Any]:
    """Each callable once: an alias (FINAL for final) is the same object under another name."""
    seen: dict[int, str] = {}
    for name, value in namespace.items():
        if callable(value) and not isinstance(value, type) and id(value) not in seen:
            seen[id(value)] = name
    return {name: namespace[name] for name in seen.values()}


def test_every_function_of_the_sandbox_is_declared(worker_namespace: dict[str, Any]) -> None:
    assert sorted(_functions(worker_namespace)) == sorted(IN_CODE)


def _accepts(function: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether the call is taken; a TypeError is a call the function does not take (what it
    does with the values is not asked here)."""
    try:
        function(*args, **kwargs)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("name", list(IN_CODE))
def test_the_worker_functions_take_the_declared_arguments(
    worker_namespace: dict[str, Any], name: str
) -> None:
    spec = IN_CODE[name]
    function = worker_namespace[name]
    values = {a.name: _sample(spec, a) for a in spec.args}
    by_position = [values[a.name] for a in spec.args if not a.keyword]
    by_name = {a.name: values[a.name] for a in spec.args if a.keyword}
    assert _accepts(function, [values[a.name] for a in spec.args], {}), f"{name}: by position"
    assert _accepts(function, by_position, by_name), f"{name}: by name"
    assert not _accepts(function, by_position, {**by_name, "no_such_argument": 1}), f"{name}: unknown name"
    for arg in (a for a in spec.args if a.required):
        rest = {k: v for k, v in by_name.items() if k != arg.name}
        assert not _accepts(function, [], rest), f"{name}: runs without required `{arg.name}`"
    # Its parameters, where it names them, are the declared ones in order, with their defaults.
    params = inspect.signature(function).parameters.values()
    named = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    variadic = len(named) < len(params)
    declared = spec.arg_names()
    assert [p.name for p in named] == (declared[: len(named)] if variadic else declared), (name, named)
    for p, arg in zip(named, spec.args, strict=False):
        if not arg.required:
            assert p.default == arg.default, (name, p.name, p.default, arg.default)
        elif not variadic:
            assert p.default is p.empty, (name, p.name)
    # Defaults it does not name: leaving them out is giving them.
    required = [values[a.name] for a in spec.args if a.required]
    optional = {a.name: a.default for a in spec.args if not a.required and a.keyword}
    assert repr(function(*required)) == repr(function(*required, **optional)), name


def test_the_readme_names_every_action_by_its_declared_signature() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    for spec in ACTIONS.values():
        assert f"| `{signature(spec)}` |" in readme, signature(spec)
