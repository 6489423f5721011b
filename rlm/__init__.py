"""rlm: answer questions about files far too big for any prompt.

The Python API (README, "Python API"): `rlm.ask`, `await rlm.aask`, `rlm.estimate`, the typed
`Result` and `Estimate`, and the exceptions, each carrying its exit code. `import rlm` stays
cheap: a name is imported from rlm.api or rlm.errors the first time it is used (no litellm,
typer, rich or DuckDB before a run needs them).
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing (a few milliseconds of every `import rlm`);
# type checkers read the name as true.
TYPE_CHECKING = False

__version__ = "0.1.0"

# Where each public name lives; imported on first use (PEP 562).
_LAZY = {
    "ask": "rlm.api.ask",
    "aask": "rlm.api.ask",
    "estimate": "rlm.api.estimate",
    "Estimate": "rlm.api.estimate",
    "Result": "rlm.api.result",
    "Citation": "rlm.api.result",
    "Finding": "rlm.api.result",
    "Usage": "rlm.api.result",
    "NoAnswer": "rlm.api.errors",
    "BudgetExceeded": "rlm.api.errors",
    "ProviderError": "rlm.api.errors",
    "RlmError": "rlm.errors",
    "UsageError": "rlm.errors",
    "InputError": "rlm.errors",
    "ConfigError": "rlm.errors",
    "InternalError": "rlm.errors",
    "ExitCode": "rlm.errors",
}

__all__ = [
    "BudgetExceeded",
    "Citation",
    "ConfigError",
    "Estimate",
    "ExitCode",
    "Finding",
    "InputError",
    "InternalError",
    "NoAnswer",
    "ProviderError",
    "Result",
    "RlmError",
    "Usage",
    "UsageError",
    "__version__",
    "aask",
    "ask",
    "estimate",
]

if TYPE_CHECKING:
    from rlm.api.ask import aask, ask
    from rlm.api.errors import BudgetExceeded, NoAnswer, ProviderError
    from rlm.api.estimate import Estimate, estimate
    from rlm.api.result import Citation, Finding, Result, Usage
    from rlm.errors import ConfigError, ExitCode, InputError, InternalError, RlmError, UsageError


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'rlm' has no attribute {name!r}")
    # importlib, not an import statement: the lower floors import `rlm` for its version, and an
    # import of rlm.api written here would read as one from each of them (docs/architecture.md).
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
