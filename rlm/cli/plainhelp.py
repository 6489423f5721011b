"""Help that reads like a terminal tool's: `rlm ask [OPTIONS] FILE QUESTION`, `--model MODEL`.

typer writes required arguments as `{FILE}` and every value as its Python type (`<str>`,
`<int>`), which users took for syntax to type. Every command of the CLI is built with
`PlainHelp`, which names arguments and option values as words instead.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperOption


class PlainHelp(TyperCommand):
    """A typer command whose help names arguments and option values in words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                # The argument's own name says what it is; no "<str>" after it.
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
            elif (
                isinstance(param, TyperOption)
                and not (param.is_flag or param.count)
                and param.metavar is None
            ):
                param.metavar = (param.name or "value").upper().replace("_", "-")

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or (param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces
