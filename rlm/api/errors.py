"""The exceptions of the API, each carrying the exit code `rlm ask` would end with.

`rlm.errors` holds the errors any part of rlm raises (input, configuration, usage, provider,
internal). A run that ends without an answer is not an error inside the run: the engine returns
it with a status, and the CLI prints what it can and exits non-zero. The API raises there
instead, so code that reads `ask(...).answer` never takes a partial answer for a whole one; the
exception's `result` still holds everything the run established, the partial answer included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlm.errors import ExitCode, RlmError
from rlm.errors import ProviderError as _ProviderError

if TYPE_CHECKING:
    from rlm.api.result import Result


class RunEnded(RlmError):
    """A run that ended without a whole answer; `result` is what it established."""

    def __init__(self, message: str, result: Result | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.trace_path = result.trace if result is not None else None


class NoAnswer(RunEnded):
    """No answer could be established, or `strict=True` withheld one not grounded or in doubt (exit 1)."""

    exit_code = ExitCode.NO_ANSWER


class BudgetExceeded(RunEnded):
    """A limit (calls, tokens, cost, time) stopped the run (exit 6); `result.answer` is the partial
    answer written from what was established before, or None."""

    exit_code = ExitCode.BUDGET


class ProviderError(_ProviderError):
    """The model provider kept failing after retries (exit 5); `result`, when the run got as far as
    writing one, holds the partial answer. Also caught by `except rlm.errors.ProviderError`."""

    def __init__(self, message: str, result: Result | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.trace_path = result.trace if result is not None else None


def raise_for(result: Result) -> None:
    """Raise the exception of a result whose exit code is not 0 (returns for an answered run)."""
    if result.exit_code == ExitCode.OK:
        return
    if result.exit_code == ExitCode.BUDGET:
        raise BudgetExceeded(result.message, result)
    if result.exit_code == ExitCode.PROVIDER:
        raise ProviderError(result.message, result)
    raise NoAnswer(result.message, result)
