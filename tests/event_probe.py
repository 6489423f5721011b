"""`rlm` as a user runs it, with its progress sinks watched: `python event_probe.py LOG ARGS...`.

Every event the stderr renderer and the --jsonl writer are handed is described, one JSON
line each, in the file LOG: the sink, the event's class, its declared name, and every way it
departs from its declaration (tests/test_progress_events.py reads it).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


def conforms(value: Any, hint: Any) -> bool:
    """Whether a value is of an annotated type (the forms the event declarations use)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin is Literal:
        return value in get_args(hint)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in get_args(hint))
    if origin is not None:
        return isinstance(value, origin)
    if hint in (int, float):
        return isinstance(value, int | float if hint is float else int) and not isinstance(value, bool)
    return isinstance(value, hint)


def describe(sink: str, event: Any) -> dict[str, Any]:
    """The event as its declaration sees it: its class, name, and what does not fit."""
    from rlm.run.events import EVENT_TYPES, KINDS

    kind = getattr(event, "event", None)
    problems: list[str] = []
    if type(event) not in EVENT_TYPES:
        problems.append(f"{type(event).__qualname__} is not a declared event type")
    elif KINDS.get(str(kind)) is not type(event):
        problems.append(f"{kind!r} is not the declared name of {type(event).__qualname__}")
    else:
        hints = get_type_hints(type(event))
        for field in dataclasses.fields(event):
            value = getattr(event, field.name)
            if not conforms(value, hints[field.name]):
                problems.append(f"{kind}.{field.name} = {value!r} is not {hints[field.name]}")
    return {"sink": sink, "type": type(event).__qualname__, "event": kind, "problems": problems}


def watch(log: str) -> None:
    """Wrap the CLI's two sinks so each event they are handed is described in `log`."""
    from rlm.cli.events import JsonlEvents
    from rlm.cli.render import StderrReporter

    for cls in (StderrReporter, JsonlEvents):
        original = cls.__call__

        def seen(self: Any, event: Any, _original: Any = original, _name: str = cls.__name__) -> None:
            with open(log, "a", encoding="utf-8") as out:
                out.write(json.dumps(describe(_name, event)) + "\n")
            _original(self, event)

        cls.__call__ = seen  # type: ignore[method-assign]


if __name__ == "__main__":
    watch(sys.argv[1])
    sys.argv = ["rlm", *sys.argv[2:]]
    from rlm.cli.app import main

    main()
