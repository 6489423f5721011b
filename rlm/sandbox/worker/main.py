"""The sandbox worker: a child process that holds the input and runs model code.

It speaks JSON lines over its stdin/stdout pipes (never pickle). It opens the
input and imports everything it needs first, then applies the OS limits, and
only then accepts cells. Requests from the parent:

    {"op": "exec", "code": ..., "cpu_seconds": ...}
    {"op": "peek", "start", "length", "unit"}   {"op": "grep", "pattern", "max_matches", "ignore_case"}
    {"op": "set", "name", "value"}             (JSON value into the namespace, e.g. partition_map results)
    {"op": "ping"}

While a cell runs, calls to llm_query / partition_map / recall are sent to the parent as
{"bridge": name, "args": {...}} and the worker waits for {"bridge_result": ...}
or {"bridge_error": "..."}; the parent owns every model call.

Over 400 lines: start-up, preloading before lock-down and the request loop are one
sequence whose order is the safety argument.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import re
import signal
import sys
import time
from typing import Any

from rlm.sandbox.oslimits import apply_os_limits, arm_cpu_timer, disarm_cpu_timer
from rlm.sandbox.worker.files import file_of_helper, lines_of_helper, part_locator, window_parts
from rlm.sandbox.worker.formatting import MAX_CELL_OUTPUT, format_grep, format_peek_chars, format_peek_lines
from rlm.sandbox.worker.grep_result import GrepMatches
from rlm.sandbox.worker.interpreter import CellOutcome, Interpreter
from rlm.sandbox.worker.policy import REFUSED_AT_RUN_TIME
from rlm.sandbox.worker.sql_session import sql_helper
from rlm.text.textcap import cap_middle
from rlm.text.textfile import Lines, MappedText, start_scan_threads

# MAX_CELL_OUTPUT (rlm.sandbox.worker.formatting): a cell's output is capped here already so a
# runaway print cannot flood the pipe; the parent cuts it again to the observation size.
# Lines a grep result's echo may show, whatever max_matches asks: the output cap cuts long before.
GREP_SHOWN_MAX = 100_000
GREP_SHOWN = 50  # lines a grep echo shows unless max_matches says otherwise
# A text handed to llm_query travels to the parent in one message; the parent reads
# at most MAX_MESSAGE_BYTES per message (rlm.sandbox.client), so the text stays under it.
LLM_QUERY_TEXT_MAX_CHARS = 16_000_000
# The parent's cap on one message from the worker (kept equal to client.MAX_REPLY_BYTES).
MAX_MESSAGE_BYTES = 64_000_000
INTERNAL = "internal error in the sandbox"
_NOTHING = object()  # final() called with no value


def _is_text(value: Any) -> bool:
    """A text or lines a model passes to a helper: a string that is no line number, or a sequence of lines."""
    if isinstance(value, str):
        return not value.strip().isdigit()
    return isinstance(value, Lines | GrepMatches | list | tuple)


def _is_line_number(value: Any) -> bool:
    """A whole number, or a string of digits (the parent reads both)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or isinstance(value, str) and value.strip().isdigit()


class Shown(str):
    """A string whose REPL echo is the text itself, so `peek(1, 5)` reads well as a last expression."""

    def __repr__(self) -> str:
        return str(self)


class SubCallError(Exception):
    """A model call made from code failed; the message says why."""


class Worker:
    def __init__(self, spec: dict[str, Any], proto_in: Any, proto_out: Any) -> None:
        self.spec = spec
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.text = MappedText(
            spec["path"],
            encoding=spec.get("encoding") or "utf-8",
            start_line=spec.get("start_line"),
            end_line=spec.get("end_line"),
            index_path=spec.get("index_path"),
        )
        self._context: Any = None
        # Several inputs read as one: each file's lines, as this worker numbers them.
        self.files = window_parts(spec.get("parts"), spec.get("start_line"), spec.get("end_line"))
        self.part_of = part_locator(
            spec.get("parts"), spec.get("start_line")
        )  # peek and grep name each line's file
        # Opens the table now (after lock-down no other file can be opened); one still being built
        # is asked of the parent at the first sql() and read from the one folder Landlock leaves.
        self.sql = sql_helper(spec, ask=self._bridge)
        self.notes: list[str] = []
        self.final_answer: str | None = None
        self.interpreter = Interpreter(self._protected())

    # -- the helpers model code can call --------------------------------------
    def _protected(self) -> dict[str, Any]:
        # Plain functions, not bound methods: Python's own argument errors then name
        # `grep()`, never `Worker.grep()`.
        def peek(start: int, length: int = 20, unit: str = "lines") -> Shown:
            return self.peek(start, length, unit)

        def grep(pattern: Any, *args: Any, **kwargs: Any) -> GrepMatches:
            return self.grep_in_code(pattern, *args, **kwargs)

        def llm_query(
            question: str, start_line: int | None = None, end_line: int | None = None, text: Any = None
        ) -> str:
            return self.llm_query(question, start_line, end_line, text)

        def partition_map(
            question: str,
            chunk_lines: int | None = None,
            chunk_chars: int | None = None,
            result_var: str = "results",
            by: str | None = None,
        ) -> list[Any]:
            return self.partition_map(question, chunk_lines, chunk_chars, result_var, by)

        def note(*parts: Any) -> str:
            # Small models call it as they call print: note("total:", n).
            return self.note(" ".join(str(p) for p in parts))

        def recall(ref: Any) -> str:
            return Shown(str(self._bridge("recall", {"ref": str(ref)})))

        def final(answer: Any = _NOTHING, *more: Any) -> str:
            if more or answer is _NOTHING:
                # A small model passes every variable it made (final(total_lines, distinct_ips, top)).
                raise TypeError(
                    f"final takes one value, the answer to the question; you passed {len(more) + 1 if more else 0}: "
                    "call final with the one variable that answers it"
                )
            return self.final(answer)

        return {
            "context_lines": self.text.lines,
            "peek": peek,
            "grep": grep,
            "sql": self.sql,
            "llm_query": llm_query,
            "partition_map": partition_map,
            "note": note,
            "recall": recall,
            "final": final,
            "FINAL": final,
            **(
                {
                    "context_files": self.files,
                    "file_of": file_of_helper(self.files, self.text.n_lines),
                    "lines_of": lines_of_helper(self.files, self.text.lines),
                }
                if self.files
                else {}
            ),
        }

    def context(self) -> Any:
        if self._context is None:
            self._context = self.text.text()
        return self._context

    def peek(self, start: int, length: int = 20, unit: str = "lines") -> Shown:
        try:
            start, length = int(start), int(length)
        except (TypeError, ValueError):
            raise TypeError(
                "peek(start, length=20, unit='lines'): start and length are whole numbers"
            ) from None
        if unit == "chars":
            n_chars = getattr(self.text, "n_chars", None)
            length = min(length, MAX_CELL_OUTPUT)
            return Shown(
                format_peek_chars(self.text.peek_chars(max(0, start), length), max(0, start), n_chars)
            )
        if unit != "lines":
            raise ValueError("unit must be 'lines' or 'chars'")
        rows = self.text.peek_lines(start, length, max_bytes=MAX_CELL_OUTPUT)
        return Shown(format_peek_lines(rows, start, length, self.text.n_lines, self.part_of))

    def grep(self, pattern: str, max_matches: int = GREP_SHOWN, ignore_case: bool = False) -> tuple[str, int]:
        """The grep action: its text (the exact total and the first max_matches lines) and the total.
        It counts as it scans and keeps only the lines it shows."""
        shown = max(1, min(GREP_SHOWN_MAX, max_matches))
        result = self.text.grep(str(pattern), max_matches=shown, ignore_case=bool(ignore_case))
        return format_grep(str(pattern), result.total, result.matches, self.part_of), result.total

    def grep_all(self, pattern: str, max_matches: int = GREP_SHOWN, ignore_case: bool = False) -> GrepMatches:
        """grep() in code: every matching line. max_matches is how many of them its echo shows,
        as for the action; it never bounds the result (a bounded list's len() read as the count)."""
        numbers = self.text.grep_lines(str(pattern), ignore_case=bool(ignore_case))
        shown = max(1, min(GREP_SHOWN_MAX, max_matches))
        return GrepMatches(str(pattern), numbers, self.text.shown_line, shown, self.part_of)

    def grep_in_code(self, pattern: Any, *args: Any, **kwargs: Any) -> GrepMatches:
        """grep() as model code calls it. The common slips are understood: the text to
        search passed along (grep always searches the whole file), the pattern second."""
        usage = (
            "grep(pattern, max_matches=50, ignore_case=False) searches the whole file and returns every "
            "matching line as (line_number, line); max_matches is how many its echo shows. "
            "Write for example grep('Failed password')"
        )
        unknown = set(kwargs) - {"pattern", "max_matches", "ignore_case"}
        if unknown:
            raise TypeError(f"grep() has no argument {sorted(unknown)[0]!r}: {usage}")
        positional = [pattern, *args] if "pattern" not in kwargs else list(args)
        if "pattern" in kwargs:
            positional.insert(0, kwargs.pop("pattern"))
        texts = [a for a in positional if a is self.text.lines or a is self._context or isinstance(a, Lines)]
        rest = [a for a in positional if not any(a is t for t in texts)]
        patterns = [a for a in rest if isinstance(a, str)]
        numbers = [a for a in rest if isinstance(a, int) and not isinstance(a, bool)]
        flags = [a for a in rest if isinstance(a, bool)]
        if (
            len(patterns) != 1
            or len(numbers) > 1
            or len(flags) > 1
            or len(rest) != len(patterns) + len(numbers) + len(flags)
        ):
            raise TypeError(usage)
        max_matches = kwargs.get("max_matches", numbers[0] if numbers else GREP_SHOWN)
        ignore_case = kwargs.get("ignore_case", flags[0] if flags else False)
        if isinstance(max_matches, bool) or not isinstance(max_matches, int):
            raise TypeError(f"max_matches is the number of matching lines its echo shows: {usage}")
        return self.grep_all(patterns[0], max_matches, bool(ignore_case))

    def _bridge(self, name: str, args: dict[str, Any]) -> Any:
        self.send({"bridge": name, "args": args})
        reply = self.receive()
        if reply is None:
            raise SystemExit(0)
        if "bridge_error" in reply:
            raise SubCallError(str(reply["bridge_error"]))
        return reply.get("bridge_result")

    def llm_query(
        self,
        question: Any,
        start_line: Any = None,
        end_line: Any = None,
        text: Any = None,
    ) -> str:
        usage = (
            "llm_query(question, start_line=None, end_line=None, text=None) asks about lines "
            "start_line..end_line of the file, or about a text you pass as text=..."
        )
        if text is None and end_line is None and _is_text(start_line):
            text, start_line = start_line, None  # the text passed where the line numbers go
        if _is_text(question) and not isinstance(question, str):
            raise TypeError(f"the first argument is the question, as a string: {usage}")
        for name, value in (("start_line", start_line), ("end_line", end_line)):
            if value is not None and not _is_line_number(value):
                raise TypeError(f"{name} is a line number (a whole number), not {value!r}: {usage}")
        args = {"question": str(question), "start_line": start_line, "end_line": end_line}
        if text is not None:
            # Lines (a view of context_lines, a list) are the text they hold, one a line:
            # str() of a long view is only its short echo.
            text = (
                "\n".join(map(str, text))
                if isinstance(text, Lines | GrepMatches | list | tuple)
                else str(text)
            )
            if len(text) > LLM_QUERY_TEXT_MAX_CHARS:
                raise ValueError(
                    f"llm_query(text=...) takes at most {LLM_QUERY_TEXT_MAX_CHARS:,} characters and this text has "
                    f"{len(text):,}: for a range of the file pass start_line and end_line instead, or "
                    "partition_map for the whole file"
                )
            args["text"] = text
        return str(self._bridge("llm_query", args))

    def partition_map(
        self,
        question: str,
        chunk_lines: int | None = None,
        chunk_chars: int | None = None,
        result_var: str = "results",
        by: str | None = None,
    ) -> list[Any]:
        args: dict[str, Any] = {
            "question": str(question),
            "chunk_lines": chunk_lines,
            "chunk_chars": chunk_chars,
        }
        if by is not None:
            args["by"] = str(by)
        results = list(self._bridge("partition_map", args) or [])
        if isinstance(result_var, str) and result_var.isidentifier() and not result_var.startswith("_"):
            self.interpreter.namespace[result_var] = results
        return results

    def note(self, text: Any) -> str:
        self.notes.append(str(text))
        return Shown(f"noted: {text}")

    def final(self, answer: Any) -> str:
        # A list is an answer of one item per line, as stdout gives it (a Python repr is not).
        if isinstance(answer, list | tuple | set | frozenset):
            self.final_answer = "\n".join(str(item) for item in answer)
        else:
            self.final_answer = str(answer)
        return Shown("final answer recorded")

    # -- protocol ---------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False).encode("utf-8", "replace")
        if len(data) > MAX_MESSAGE_BYTES:
            # The parent would kill a worker that sends more: say what happened instead.
            data = json.dumps(
                {
                    "ok": False,
                    "internal": True,
                    "error": f"{INTERNAL}: a reply of {len(data):,} bytes was too large",
                }
            ).encode()
        self.proto_out.write(data + b"\n")
        self.proto_out.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self.proto_in.readline()
        if not line:
            return None
        msg: dict[str, Any] = json.loads(line)
        return msg

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True}
        if op == "peek":
            try:
                return {
                    "ok": True,
                    "output": str(self.peek(req["start"], req.get("length", 20), req.get("unit", "lines"))),
                }
            except (ValueError, TypeError) as exc:
                return {"ok": False, "error": str(exc)}
        if op == "grep":
            try:
                output, total = self.grep(
                    req["pattern"], req.get("max_matches", GREP_SHOWN), req.get("ignore_case", False)
                )
            except re.error as exc:
                return {"ok": False, "error": f"invalid regular expression /{req['pattern']}/: {exc}"}
            return {"ok": True, "output": output, "total": total}
        if op == "set":
            name = req.get("name", "")
            if not (isinstance(name, str) and name.isidentifier() and not name.startswith("_")):
                return {"ok": False, "error": f"invalid variable name {name!r}"}
            self.interpreter.namespace[name] = req.get("value")
            return {"ok": True}
        if op == "exec":
            return self.execute(req.get("code", ""), req.get("cpu_seconds"))
        return {"ok": False, "error": f"unknown op {op!r}"}

    def execute(self, code: str, cpu_seconds: float | None) -> dict[str, Any]:
        self.notes, self.final_answer = [], None
        protected = self._protected()
        # Decoding the whole file into `context` costs time and memory; do it only
        # for cells that use the name.
        if re.search(r"\bcontext\b", code):
            protected["context"] = self.context()
        self.interpreter.update_protected(protected)
        if cpu_seconds:
            arm_cpu_timer(float(cpu_seconds))
        try:
            try:
                outcome = self.interpreter.run(code)
            finally:
                if cpu_seconds:
                    disarm_cpu_timer()
        except BaseException as exc:  # the CPU timer can fire between the cell's end and disarming
            if type(exc).__name__ != "CpuTimeExceeded":
                raise
            outcome = CellOutcome(output="", error=f"the cell used more than {cpu_seconds:g} s of CPU time")
        output = outcome.output
        truncated = len(output)
        if len(output) > MAX_CELL_OUTPUT:
            output = cap_middle(output, MAX_CELL_OUTPUT)
        reply = {
            "ok": outcome.error is None,
            "output": output,
            "output_chars": truncated,
            "error": outcome.error,
            "notes": self.notes,
            "final": self.final_answer,
        }
        if outcome.error is not None and not _has_headroom():
            # The variables hold all the memory there is: the next request would fail
            # wherever it allocates. The parent restarts the worker now, and says so.
            reply["exhausted"] = True
        return reply

    def serve(self) -> None:
        while True:
            try:
                req = self.receive()
            except MemoryError:
                return  # nothing left to read a request with: exit, and the parent starts a new worker
            if req is None:
                return
            try:
                reply = self.handle(req)
            except SubCallError as exc:
                reply = {"ok": False, "error": str(exc)}
            except Exception as exc:  # a fault of ours, not of the model's code: report it, keep serving
                reply = {"ok": False, "internal": True, "error": f"{INTERNAL}: {type(exc).__name__}: {exc}"}
            if LATE_IMPORTS:
                # Each is a module the worker needed but had not loaded before lock-down:
                # a defect of ours, whatever the code made of the ImportError.
                reply["late_imports"] = sorted(set(LATE_IMPORTS))
                LATE_IMPORTS.clear()
            if REFUSED_AT_RUN_TIME:
                # Imports by the C code of an allowed module, refused by the guard: also ours.
                reply["refused_imports"] = sorted(set(REFUSED_AT_RUN_TIME))
                REFUSED_AT_RUN_TIME.clear()
            self.send(reply)


# Imported before lock-down: afterwards no file can be opened, so a lazy import would fail.
# The codecs are those model code asks for by name (`s.encode("utf-16-le")`); the allowed
# modules themselves are imported, and warmed up, by rlm.sandbox.worker.policy.
_CODECS = (
    "utf_8_sig utf_16 utf_16_le utf_16_be utf_32 utf_32_le utf_32_be utf_7 ascii latin_1 "
    "iso8859_2 iso8859_15 cp1250 cp1251 cp1252 cp437 cp850 mac_roman koi8_r "
    "unicode_escape raw_unicode_escape idna punycode hex_codec base64_codec"
).split()
_PRELOAD = ("numpy", "_strptime", "unicodedata", *(f"encodings.{c}" for c in _CODECS))

# What a worker must still be able to allocate after a failed cell to go on serving.
HEADROOM_PROBE_BYTES = 32 * 1024 * 1024


def _has_headroom() -> bool:
    try:
        probe = bytearray(HEADROOM_PROBE_BYTES)
    except MemoryError:
        return False
    del probe
    return True


# Modules something tried to import after lock-down (see _forbid_late_imports).
LATE_IMPORTS: list[str] = []


class LateImport(ImportError):
    """An import after lock-down: it cannot work (no file can be opened) and is a defect of ours."""


def _preload() -> None:
    for name in _PRELOAD:
        importlib.import_module(name)


def _forbid_late_imports() -> None:
    """From here on any import of a module not yet loaded fails at once, by name, and is
    reported to the parent with the next reply, even when the code that tried it
    swallowed the ImportError."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "import":
            LATE_IMPORTS.append(str(args[0]))
            raise LateImport(f"module {args[0]!r} was not loaded before the sandbox was locked")

    sys.addaudithook(hook)


def _apply_os_limits(spec: dict[str, Any]) -> dict[str, Any]:
    report = apply_os_limits(
        memory_bytes=int(spec.get("memory_bytes") or 0),
        drop_to_uid=spec.get("drop_to_uid"),
        readable_dir=spec.get("table_dir") or None,
    )
    return {"active": list(report.active), "missing": [list(m) for m in report.missing]}


def _die_with_parent() -> None:
    """The kernel kills the worker when rlm dies, however it dies (a second Ctrl-C, SIGKILL):
    a worker busy in a cell would not notice its closed pipe."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def main() -> None:
    _die_with_parent()
    # The protocol gets a private copy of stdout; fd 1 then points at stderr so
    # that nothing model code or C libraries print can corrupt the protocol.
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    proto_in = sys.stdin.buffer
    spec_line = proto_in.readline()
    if not spec_line:
        return
    spec = json.loads(spec_line)
    try:
        worker = Worker(spec, proto_in, proto_out)
    except Exception as exc:  # the parent reports it; it is not a crash of the run
        proto_out.write(
            json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n"
        )
        return
    _preload()
    # Threads cannot start after lock-down (RLIMIT_NPROC 0): the scan threads start now.
    start_scan_threads()
    sandbox = _apply_os_limits(spec) if spec.get("os_limits", True) else {"active": [], "missing": []}
    _forbid_late_imports()
    # `at`: when it was ready, on the clock the parent shares (CLOCK_MONOTONIC is system-wide):
    # the parent reads this message only at the node's first action.
    worker.send({"ready": True, "n_lines": worker.text.n_lines, "sandbox": sandbox, "at": time.monotonic()})
    worker.serve()


if __name__ == "__main__":
    main()
