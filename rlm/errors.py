"""Errors that reach the user, each bound to one documented exit code.

The CLI turns any `RlmError` into a one-line message on stderr and its exit
code; nothing else should need to know how errors are presented.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit codes scripts can rely on (README, "Exit codes")."""

    OK = 0
    NO_ANSWER = 1
    USAGE = 2
    INPUT = 3
    CONFIG = 4
    PROVIDER = 5
    BUDGET = 6
    INTERRUPTED = 130
    TERMINATED = 143


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal: exit 130 for SIGINT (Ctrl-C), 143 for SIGTERM.

    `last` keeps the latest stop's code: a library that swallows the interrupt (DuckDB turns
    it into a query error) is answered by raising `Interrupted.again()` in its place."""

    last: int | None = None

    def __init__(self, exit_code: int = ExitCode.INTERRUPTED) -> None:
        super().__init__()
        self.exit_code = int(exit_code)
        Interrupted.last = self.exit_code

    @classmethod
    def again(cls) -> Interrupted:
        return cls(cls.last or ExitCode.INTERRUPTED)


class RlmError(Exception):
    """Base class: a message fit for one line of stderr, and an exit code."""

    exit_code: ExitCode = ExitCode.NO_ANSWER
    # Where the run's trace was left, when the error ended a run that had one.
    trace_path: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(RlmError):
    exit_code = ExitCode.USAGE


class InputError(RlmError):
    """The input (or a trace given to replay) cannot be read."""

    exit_code = ExitCode.INPUT


class ConfigError(RlmError):
    """No model configured, missing credentials, a local model not set up."""

    exit_code = ExitCode.CONFIG


class ProviderError(RlmError):
    """The model provider kept failing after retries."""

    exit_code = ExitCode.PROVIDER


class InternalError(RlmError):
    """An unexpected exception (a bug): one line, exit 1, the traceback kept in the trace."""

    exit_code = ExitCode.NO_ANSWER
