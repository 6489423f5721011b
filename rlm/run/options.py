"""What an option is: one declaration per setting, from which everything else is derived.

A setting is declared once, as a field of `rlm.run.settings.Settings` whose default is
`option(...)`: its type and default are the field's, its config-file key is the field's
name, its environment variable is `RLM_` + the name in capitals, and the declaration adds
the flag(s), the bounds it accepts and its help. `options_of` turns those fields into
`Option`s, which check and convert a value from any source (`Option.coerce`) and say what
they are in `rlm ask --help` and in the README's options table (scripts/readme_tables.py).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

# The metadata key under which a field carries its declaration.
_KEY = "rlm-option"
_KINDS: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: its type, and the bounds beyond which it makes no sense."""

    kind: type
    low: float | None = None
    above: bool = False  # the low bound itself is refused (a time limit of 0 s)
    high: float | None = None
    choices: tuple[str, ...] = ()

    def expects(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return "a text (a name, a path or a URL)"
        noun = "a whole number" if self.kind is int else "a number"
        bounds = []
        if self.low is not None:
            bounds.append(f"above {_num(self.low)}" if self.above else f"at least {_num(self.low)}")
        if self.high is not None:
            bounds.append(f"at most {_num(self.high)}")
        return f"{noun} ({', '.join(bounds)})" if bounds else noun

    def coerce(self, value: Any, optional: bool) -> Any:
        """`value` as this rule's type; ValueError naming what is expected when it is not one,
        or out of bounds. An optional setting takes None (and "", an unset variable)."""
        if value is None or (value == "" and optional):
            if optional:
                return None
            raise ValueError(self.expects())
        try:
            if self.kind is bool:
                if isinstance(value, bool):
                    return value
                word = str(value).strip().lower() if isinstance(value, str) else None
                if word in _TRUE or word in _FALSE:
                    return word in _TRUE
                raise ValueError
            if self.kind is str:
                # A TOML table or list where a path goes, or a NUL no system call takes.
                if not isinstance(value, str) or "\x00" in value or value.strip() == "":
                    raise ValueError
                if self.choices and value not in self.choices:
                    raise ValueError
                return value
            number = self._number(value)
        except ValueError:
            raise ValueError(self.expects()) from None
        too_low = self.low is not None and (number <= self.low if self.above else number < self.low)
        if too_low or (self.high is not None and number > self.high):
            raise ValueError(self.expects())
        return number

    def _number(self, value: Any) -> int | float:
        """`value` as the rule's number type; ValueError when it is not one (bool, 2.5 for an int, nan)."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        number = float(value.strip()) if isinstance(value, str) else float(value)
        if not math.isfinite(number):
            raise ValueError
        if self.kind is int:
            if not number.is_integer():
                raise ValueError
            # Exact for digits (a float would round a 20-digit count), else the float's value (1e6).
            digits = isinstance(value, str) and value.strip().lstrip("+-").isdigit()
            return int(value) if digits else int(number)
        return number


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class _Declaration:
    help: str
    flags: tuple[str, ...]
    low: float | None
    above: bool
    high: float | None
    choices: tuple[str, ...]
    unset: str
    doc: str


def option(
    default: Any,
    help: str,
    *,
    flags: tuple[str, ...] = (),
    low: float | None = None,
    above: bool = False,
    high: float | None = None,
    choices: tuple[str, ...] = (),
    unset: str = "",
    doc: str = "",
) -> Any:
    """A Settings field's default together with the rest of its declaration.

    `flags`: its command-line flags (none: set by environment or config file only); a bool
    setting's flag is a switch that sets the opposite of its default (`--no-trace`).
    `low`/`above`/`high`/`choices`: what it accepts (see Rule). `unset`: what the default
    means when it is None (`30, plus 60 per GiB of input`). `help`: one line for --help;
    `doc`: a longer text for the README, when the line is not enough.
    """
    declared = _Declaration(help, flags, low, above, high, choices, unset, doc)
    return field(default=default, metadata={_KEY: declared})


@dataclass(frozen=True)
class Option:
    """One setting as its declaration and its field describe it together."""

    name: str
    kind: type
    optional: bool
    default: Any
    rule: Rule
    help: str
    flags: tuple[str, ...]
    unset: str
    doc: str

    @property
    def env(self) -> str:
        return "RLM_" + self.name.upper()

    @property
    def key(self) -> str:
        """The config file's key."""
        return self.name

    @property
    def flag(self) -> str:
        """The long flag, as messages about a flag's value name it (or the one it would have)."""
        long = [f for f in self.flags if f.startswith("--")]
        return long[0] if long else "--" + self.name.replace("_", "-")

    @property
    def switch(self) -> bool:
        """A flag without a value: it sets the opposite of the default."""
        return self.kind is bool

    def coerce(self, value: Any) -> Any:
        return self.rule.coerce(value, self.optional)

    def switched(self) -> Any:
        """The value a switch flag sets."""
        return not self.default

    def default_text(self) -> str:
        """The default in words: `20`, `2,000,000`, `auto`, or what None stands for."""
        if self.default is None:
            return self.unset
        if self.kind is bool:
            return "on" if self.default else "off"
        if isinstance(self.default, int | float):
            return _num(self.default)
        return str(self.default)

    def env_text(self) -> str:
        """The variable, with the value that does what the switch does (`RLM_TRACE=0`)."""
        if self.switch:
            return f"{self.env}={'1' if self.switched() else '0'}"
        return self.env

    def help_line(self, text: str | None = None) -> str:
        """The flag's help in `--help`: what it is (`text`, where a command uses the setting for
        something narrower), its default, its variable."""
        default = "" if self.switch else self.default_text()
        what = text or self.help
        shown = f"{what}; default {default}" if default else what
        return f"{shown} (env {self.env_text()})."


def _kind(field_type: Any) -> tuple[type, bool]:
    """The value type of a field annotated `int`, `str | None`, ...; and whether None is allowed."""
    text = field_type if isinstance(field_type, str) else getattr(field_type, "__name__", str(field_type))
    parts = [p.strip() for p in text.split("|")]
    optional = "None" in parts
    names = [p for p in parts if p != "None"]
    if len(names) != 1 or names[0] not in _KINDS:
        raise TypeError(f"a setting is a str, int, float or bool (or None), not {text}")
    return _KINDS[names[0]], optional


def _option(f: Field[Any]) -> Option:
    declared = f.metadata.get(_KEY)
    if not isinstance(declared, _Declaration):
        raise TypeError(f"setting {f.name} has no option(...) declaration")
    kind, optional = _kind(f.type)
    rule = Rule(kind, declared.low, declared.above, declared.high, declared.choices)
    default = None if f.default is MISSING else f.default
    return Option(
        name=f.name,
        kind=kind,
        optional=optional,
        default=default,
        rule=rule,
        help=declared.help,
        flags=declared.flags,
        unset=declared.unset,
        doc=declared.doc or declared.help,
    )


def options_of(cls: type) -> dict[str, Option]:
    """Every field of a dataclass declared with `option(...)`, in declaration order."""
    return {f.name: _option(f) for f in fields(cls)}
