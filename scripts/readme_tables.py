#!/usr/bin/env python3
"""Write the README's options and actions tables from their declarations.

The options of `rlm ask` come from the settings' declaration (rlm.run.settings.Settings:
flag, variable, config key, default, meaning) and, for the flags that are no setting
(--json, --explain, ...), from the command itself; the actions table from the declared
vocabulary (rlm.run.actionspec). Each table sits between two HTML comments in the README
that name it; everything else in the file is left as it is.

    python scripts/readme_tables.py            # rewrite the tables in README.md
    python scripts/readme_tables.py --check    # exit 1, showing the difference, if they are stale
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def _begin(name: str) -> str:
    return f"<!-- {name} table: written by scripts/readme_tables.py from its declaration -->"


def _end(name: str) -> str:
    return f"<!-- end of {name} table -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _row(cells: list[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def _rule(n: int) -> str:
    return "|" + "---|" * n


def _meaning(text: str) -> str:
    """A help line as a table cell, worded as the README's cells are: lower case (but for a
    word that is a name, as API or OpenAI), no full stop."""
    text = text.rstrip(". ")
    first = text.split(" ", 1)[0]
    if first[:1].isupper() and (first[1:].islower() or not first[1:]):
        text = text[0].lower() + text[1:]
    return _cell(text)


def _default(o: Any) -> str:
    """A value as code (`auto`, 20), what an unset one means in words."""
    if o.switch:
        return ""
    if o.default is None:
        return _cell(o.default_text())
    return _code(o.default_text()) if isinstance(o.default, str) else o.default_text()


def options_table() -> str:
    """Every setting with a flag (as `rlm ask` takes it), then the flags of `rlm ask` that are
    no setting, then the settings set by variable or config file only."""
    import typer.main

    from rlm.cli.app import app
    from rlm.run.settings import OPTIONS

    lines = [
        _row(["flag", "env", "config key", "default", "meaning"]),
        _rule(5),
    ]
    for o in OPTIONS.values():
        if not o.flags:
            continue
        key = f"{o.key} = {'true' if o.switched() else 'false'}" if o.switch else o.key
        flags = ", ".join(_code(f) for f in o.flags)
        lines.append(_row([flags, _code(o.env_text()), _code(key), _default(o), _meaning(o.doc)]))
    command = typer.main.get_command(app)
    ask = command.commands["ask"]  # type: ignore[attr-defined]
    for param in ask.params:
        opts = [*param.opts, *param.secondary_opts]
        if param.name in OPTIONS or "--help" in opts or not opts[0].startswith("-"):
            continue
        lines.append(_row([", ".join(_code(f) for f in opts), "", "", "", _meaning(param.help or "")]))
    lines += [
        "",
        "Set by variable or config file only:",
        "",
        _row(["env", "config key", "default", "meaning"]),
        _rule(4),
    ]
    for o in OPTIONS.values():
        if not o.flags:
            lines.append(_row([_code(o.env), _code(o.key), _default(o), _meaning(o.doc)]))
    return "\n".join(lines)


def actions_table() -> str:
    """One row per action: its call with every argument and default, and what it does."""
    from rlm.run.actionspec import ACTIONS, signature

    lines = [_row(["action", "what it does"]), _rule(2)]
    for spec in ACTIONS.values():
        lines.append(_row([_code(signature(spec)), _cell(spec.readme or spec.purpose)]))
    return "\n".join(lines)


TABLES = {"options": options_table, "actions": actions_table}


def rendered(readme: str) -> str:
    """The README with each table's text between its comments written anew."""
    for name, table in TABLES.items():
        begin, end = _begin(name), _end(name)
        if readme.count(begin) != 1 or readme.count(end) != 1:
            raise SystemExit(f"README: expected one `{begin}` and one `{end}`")
        head, rest = readme.split(begin)
        _, tail = rest.split(end)
        readme = f"{head}{begin}\n{table()}\n{end}{tail}"
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the tables are stale")
    parser.add_argument("--readme", type=Path, default=README, help="the README to read (and write)")
    args = parser.parse_args(argv)
    current = args.readme.read_text(encoding="utf-8")
    wanted = rendered(current)
    if args.check:
        if wanted == current:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True), wanted.splitlines(keepends=True), "README.md", "generated"
        )
        sys.stdout.writelines(diff)
        print(f"{args.readme}: tables are stale; run python scripts/readme_tables.py", file=sys.stderr)
        return 1
    if wanted != current:
        args.readme.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
