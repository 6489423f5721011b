"""The flags of the run settings, made from their one declaration (rlm.run.settings.Settings).

`with_settings_flags(*names)` gives a command one typer option per named setting (every
setting that has a flag, when no name is given), in the place of its `flags` parameter, and
hands the command their values as `flags`: a dict from setting name to what the command
line gave, None where it gave nothing, ready for `load_settings(flags)`. Flag, value name, type and help are the
declaration's; a flag's value is checked by `load_settings` as every other source's is, so
a bad one is one line and exit 2 whichever command took it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from rlm.run.options import Option
from rlm.run.settings import OPTIONS

F = TypeVar("F", bound=Callable[..., Any])


def flagged(names: tuple[str, ...] = ()) -> list[Option]:
    """The settings with a flag, in declaration order (only those named, when names are given)."""
    chosen = [o for o in OPTIONS.values() if o.flags]
    if not names:
        return chosen
    unknown = sorted(set(names) - {o.name for o in chosen})
    if unknown:
        raise ValueError(f"no flag is declared for setting(s) {', '.join(unknown)}")
    return [o for o in chosen if o.name in names]


def _parameter(o: Option, help_text: str | None) -> inspect.Parameter:
    """The typer parameter of one setting: a switch for a bool, else an optional value."""
    help_text = o.help_line(help_text)
    if o.switch:
        info = typer.Option(*o.flags, help=help_text)
        return inspect.Parameter(
            o.name, inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[bool, info]
        )
    # The value's name in --help is the long flag's (--timeout TIMEOUT), never a type.
    info = typer.Option(*o.flags, help=help_text, metavar=o.flag.lstrip("-").upper())
    return inspect.Parameter(
        o.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[o.kind | None, info],
    )


def with_settings_flags(*names: str, help: dict[str, str] | None = None) -> Callable[[F], F]:
    """Give the command the flags of the named settings (all flagged ones by default); the
    command takes them as its `flags` parameter. `help` replaces what a flag's help says
    it is, where a command uses the setting for something narrower (`--trace-dir` of `rlm logs`);
    the default and the variable are still the declaration's."""
    chosen = flagged(names)
    texts = help or {}

    def decorate(command: F) -> F:
        own = inspect.signature(command, eval_str=True)
        if "flags" not in own.parameters:
            raise TypeError(f"{command.__name__} takes no `flags` parameter")
        kept = list(own.parameters.values())
        at = [p.name for p in kept].index("flags")
        clash = {p.name for p in kept} & {o.name for o in chosen}
        if clash:
            raise TypeError(f"{command.__name__} declares setting(s) {', '.join(sorted(clash))} itself")

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags: dict[str, Any] = {}
            for o in chosen:
                given = kwargs.pop(o.name, None)
                # A switch left off says nothing: the variable or the config file may set it.
                flags[o.name] = (o.switched() if given else None) if o.switch else given
            return command(*args, flags=flags, **kwargs)

        # typer reads the signature: the settings' flags stand where `flags` is (keyword-only,
        # so the command's own options may follow them).
        generated = [_parameter(o, texts.get(o.name)) for o in chosen]
        params = [*kept[:at], *generated, *kept[at + 1 :]]
        wrapper.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {}
        return wrapper  # type: ignore[return-value]

    return decorate
