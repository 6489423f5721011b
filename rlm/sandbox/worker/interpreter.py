"""The worker's interpreter: one persistent namespace, a cell compiled, run and its output captured.

`Interpreter.run` compiles a cell under the sandbox's policy
(rlm.sandbox.worker.policy: what the code may do), runs it in the namespace
that outlives cells, and returns what it printed (head and tail kept past a
cap) and its error in the model's terms: the message and the lines of its own
cells, never the interpreter's frames.

Imported only by the worker process, before lock-down.
"""

from __future__ import annotations

import ast
import re
import sys
import types
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlm.sandbox.worker.policy import guarded_getattr, make_builtins, restrict

__all__ = ["CellOutcome", "Interpreter"]


# ---------------------------------------------------------------------------
# Output collection
# ---------------------------------------------------------------------------


class _OutputBuffer:
    """Collects everything a cell prints. Keeps the head and the tail once
    the text passes `limit` characters, so a print loop cannot exhaust memory;
    the omitted length is stated in the text."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._tail_limit = limit // 4
        self.reset()

    def reset(self) -> None:
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self._dropped = 0

    def write(self, text: str) -> int:
        if type(text) is not str:
            text = str.__str__(text) if isinstance(text, str) else str(text)
        n = len(text)
        room = self._limit - self._tail_limit - self._head_len
        if room > 0 and not self._tail:
            part = text[:room]
            self._head.append(part)
            self._head_len += len(part)
            text = text[room:]
            if not text:
                return n
        self._tail.append(text)
        self._tail_len += len(text)
        if self._tail_len > 2 * self._tail_limit:
            joined = "".join(self._tail)
            self._dropped += len(joined) - self._tail_limit
            self._tail = [joined[-self._tail_limit :]]
            self._tail_len = self._tail_limit
        return n

    def flush(self) -> None:
        return None

    def getvalue(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        dropped = self._dropped
        if dropped and len(tail) > self._tail_limit:
            dropped += len(tail) - self._tail_limit
            tail = tail[-self._tail_limit :]
        if not dropped:
            return head + tail
        return f"{head}\n[... {dropped} characters omitted ...]\n{tail}"

    # `print` inside cells is rewritten to `_print._call_print(...)` where
    # `_print = _print_(_getattr_)`; this object is both factory result and sink.
    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        target = kwargs.get("file")
        if target is None:
            kwargs["file"] = self
        else:
            guarded_getattr(target, "write")
        print(*objects, **kwargs)


# ---------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------


@dataclass
class CellOutcome:
    output: str
    error: str | None


class _Refused(Exception):
    pass


_MAX_MESSAGE = 2000
_MAX_FRAMES = 3


class Interpreter:
    """A persistent restricted namespace; `run` executes one cell."""

    def __init__(self, protected: Mapping[str, object], *, output_limit: int = 4_000_000) -> None:
        self._protected = dict(protected)
        self.protected_ids = frozenset(id(v) for v in self._protected.values())
        self._user_classes: weakref.WeakSet[type] = weakref.WeakSet()
        self._out = _OutputBuffer(output_limit)
        self._sources: dict[str, list[str]] = {}
        self._cell = 0
        # The guards read this interpreter's protected names and namespace as they are when called.
        self._builtins = make_builtins(self, self._out, self._user_classes)
        self.namespace: dict[str, Any] = {"__builtins__": self._builtins, "__name__": "__sandbox__"}

    # -- public ------------------------------------------------------------

    @property
    def protected(self) -> dict[str, object]:
        """The names re-injected before every cell; assign to replace them
        (e.g. to add `context` only for the cells that use it)."""
        return dict(self._protected)

    @protected.setter
    def protected(self, value: Mapping[str, object]) -> None:
        self._protected = dict(value)
        self.protected_ids = frozenset(id(v) for v in self._protected.values())

    def update_protected(self, names: Mapping[str, object]) -> None:
        """Add or replace protected names (e.g. `context`, bound only for cells that use it)."""
        self._protected.update(names)
        self.protected_ids = frozenset(id(v) for v in self._protected.values())

    def run(self, code: str) -> CellOutcome:
        self._cell += 1
        filename = f"<cell {self._cell}>"
        self._sources[filename] = code.splitlines()
        self._out.reset()
        try:
            compiled = self._compile(code, filename)
        except _Refused as refused:
            return CellOutcome(output="", error=str(refused))
        self.namespace["__builtins__"] = self._builtins
        self.namespace.update(self._protected)
        error: str | None = None
        saved = sys.stdout, sys.stderr, sys.unraisablehook
        sys.stdout = sys.stderr = self._out  # libraries that print must not reach the protocol pipe
        sys.unraisablehook = self._unraisable
        try:
            exec(compiled, self.namespace)
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit included
            error = self._describe(exc, filename)
        finally:
            sys.stdout, sys.stderr, sys.unraisablehook = saved
        return CellOutcome(output=self._out.getvalue(), error=error)

    def _unraisable(self, info: Any) -> None:
        """An exception in a finalizer (e.g. a generator's `finally` run by the
        garbage collector): say so in one line, without the interpreter's
        traceback of internal frames."""
        exc = info.exc_value
        try:
            text = f"{type(exc).__name__}: {exc}" if exc is not None else "unknown error"
        except BaseException:  # noqa: BLE001 - a user __str__ may raise anything
            text = type(exc).__name__
        self._out.write(f"[an exception in a finalizer was ignored: {text[:_MAX_MESSAGE]}]\n")

    # -- compile -----------------------------------------------------------

    def _compile(self, code: str, filename: str) -> types.CodeType:
        try:
            tree = ast.parse(code, filename, "exec")
        except SyntaxError as exc:
            line = exc.lineno or 0
            raise _Refused(self._with_line(f"SyntaxError: {exc.msg} (line {line})", filename, line)) from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise _Refused(f"SyntaxError: the cell cannot be parsed: {exc}") from None
        try:
            tree, errors = restrict(tree)
        except RecursionError:
            raise _Refused("SyntaxError: the cell is nested too deeply to be checked") from None
        if errors:
            first = errors[0]
            match = re.match(r"Line (\d+): (.*)", first, re.S)
            line = int(match.group(1)) if match else 0
            text = match.group(2) if match else first
            text = text.replace(
                ", that is forbidden to access in RestrictedPython.",
                ": frame and code introspection is not allowed in this sandbox.",
            )
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise _Refused(
                self._with_line(f"PolicyError: refused by the sandbox: {text}{more}", filename, line)
            )
        body = tree.body
        if body and isinstance(body[-1], ast.Expr):
            last = body[-1]
            show = ast.Expr(ast.Call(func=ast.Name("_show_", ast.Load()), args=[last.value], keywords=[]))
            body[-1] = ast.fix_missing_locations(ast.copy_location(show, last))
        try:
            return compile(ast.fix_missing_locations(tree), filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise _Refused(f"SyntaxError: {exc}") from None

    # -- errors ------------------------------------------------------------

    def _with_line(self, text: str, filename: str, line: int) -> str:
        src = self._source_line(filename, line)
        return f"{text}\n  at line {line}: {src}" if src else text

    def _source_line(self, filename: str, line: int) -> str:
        lines = self._sources.get(filename)
        if not lines or line < 1 or line > len(lines):
            return ""
        return lines[line - 1].strip()[:300]

    def _describe(self, exc: BaseException, current: str) -> str:
        name = type(exc).__name__
        try:
            message = str(exc)
            if type(message) is not str:
                message = str.__str__(message)
        except BaseException:  # noqa: BLE001 - a user __str__ may raise anything
            message = "<message could not be shown>"
        if len(message) > _MAX_MESSAGE:
            message = message[:_MAX_MESSAGE] + f"... [{len(message) - _MAX_MESSAGE} more characters]"
        if isinstance(exc, SystemExit):
            head = f"SystemExit({message}): the cell stopped early; the sandbox keeps running"
        elif isinstance(exc, KeyboardInterrupt):
            head = "KeyboardInterrupt: the cell was interrupted"
        else:
            head = f"{name}: {message}" if message else name
        frames: list[tuple[str, int, str]] = []
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename in self._sources:
                frames.append((code.co_filename, tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        exc.__traceback__ = None  # frames hold user objects alive
        lines = [head]
        skipped = len(frames) - _MAX_FRAMES
        if skipped > 0:
            lines.append(f"  ... {skipped} earlier frames ...")
        for filename, lineno, func in frames[-_MAX_FRAMES:]:
            where = f"line {lineno}" if filename == current else f"line {lineno} of {filename.strip('<>')}"
            if func != "<module>":
                where += f", in {func}"
            lines.append(f"  at {where}: {self._source_line(filename, lineno)}")
        return "\n".join(lines)
