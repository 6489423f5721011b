"""The sandbox worker: a child process that holds the input and runs model code.

It speaks JSON lines over its stdin/stdout pipes (never pickle). It opens the
input and imports everything it needs first, then applies the OS limits, and
only then accepts cells. Requests from the parent:

    {"op": "exec", "code": ..., "cpu_seconds": ...}
    {"op": "peek", "start", "length", "unit"}   {"op": "grep", "pattern", "max_matches", "ignore_case"}
    {"op": "set", "name", "value"}             (JSON value into the namespace, e.g. partition_map results)
    {"op": "ping"}

While a cell runs, calls to llm_query / partition_map are sent to the parent as
{"bridge": name, "args": {...}} and the worker waits for {"bridge_result": ...}
or {"bridge_error": "..."}; the parent owns every model call.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from rlm.sandbox.formatting import format_grep, format_peek_chars, format_peek_lines
from rlm.sandbox.policy import CellOutcome
from rlm.textcap import cap_middle

# A cell's output is capped here already so a runaway print cannot flood the pipe;
# the parent cuts it again to the observation size.
MAX_CELL_OUTPUT = 256_000
GREP_CODE_MAX = 100_000


class Shown(str):
    """A string whose REPL echo is the text itself, so `peek(1, 5)` reads well as a last expression."""

    def __repr__(self) -> str:
        return str(self)


class GrepMatches(list):
    """grep() inside code: a list of (line_number, line) tuples with `.total`, echoed like the action."""

    def __init__(self, pattern: str, total: int, matches: list[tuple[int, str]]) -> None:
        super().__init__(matches)
        self.total = total
        self.pattern = pattern

    def __repr__(self) -> str:
        return format_grep(self.pattern, self.total, list(self))


class SubCallError(Exception):
    """A model call made from code failed; the message says why."""


class Worker:
    def __init__(self, spec: dict[str, Any], proto_in: Any, proto_out: Any) -> None:
        from rlm.textfile import MappedText

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
        from rlm.tables import sql_helper

        self.sql = sql_helper(spec)  # opens the table now: after lock-down no file can be opened
        self.notes: list[str] = []
        self.final_answer: str | None = None
        from rlm.sandbox.policy import Interpreter

        self.interpreter = Interpreter(self._protected())

    # -- the helpers model code can call --------------------------------------
    def _protected(self) -> dict[str, Any]:
        return {
            "context_lines": self.text.lines,
            "peek": self.peek,
            "grep": self.grep,
            "sql": self.sql,
            "llm_query": self.llm_query,
            "partition_map": self.partition_map,
            "note": self.note,
            "final": self.final,
            "FINAL": self.final,
        }

    def context(self) -> Any:
        if self._context is None:
            self._context = self.text.text()
        return self._context

    def peek(self, start: int, length: int = 20, unit: str = "lines") -> Shown:
        start, length = int(start), int(length)
        if unit == "chars":
            n_chars = getattr(self.text, "n_chars", None)
            return Shown(
                format_peek_chars(self.text.peek_chars(max(0, start), length), max(0, start), n_chars)
            )
        if unit != "lines":
            raise ValueError("unit must be 'lines' or 'chars'")
        rows = self.text.peek_lines(start, length)
        return Shown(format_peek_lines(rows, start, length, self.text.n_lines))

    def grep(self, pattern: str, max_matches: int = 50, ignore_case: bool = False) -> GrepMatches:
        if not isinstance(pattern, str) or isinstance(max_matches, bool) or not isinstance(max_matches, int):
            raise TypeError(
                "grep(pattern, max_matches=50, ignore_case=False): the pattern is a string and the second "
                "argument the number of matching lines to return; grep always searches the whole file"
            )
        max_matches = max(1, min(GREP_CODE_MAX, max_matches))
        result = self.text.grep(str(pattern), max_matches=max_matches, ignore_case=bool(ignore_case))
        return GrepMatches(str(pattern), result.total, result.matches)

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
        question: str,
        start_line: int | None = None,
        end_line: int | None = None,
        text: str | None = None,
    ) -> str:
        args = {"question": str(question), "start_line": start_line, "end_line": end_line}
        if text is not None:
            args["text"] = str(text)
        return str(self._bridge("llm_query", args))

    def partition_map(
        self,
        question: str,
        chunk_lines: int | None = None,
        chunk_chars: int | None = None,
        result_var: str = "results",
    ) -> list:
        args = {"question": str(question), "chunk_lines": chunk_lines, "chunk_chars": chunk_chars}
        results = list(self._bridge("partition_map", args) or [])
        if isinstance(result_var, str) and result_var.isidentifier() and not result_var.startswith("_"):
            self.interpreter.namespace[result_var] = results
        return results

    def note(self, text: Any) -> str:
        self.notes.append(str(text))
        return Shown(f"noted: {text}")

    def final(self, answer: Any) -> str:
        self.final_answer = str(answer)
        return Shown("final answer recorded")

    # -- protocol ---------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        self.proto_out.write(json.dumps(message, ensure_ascii=False).encode("utf-8", "replace") + b"\n")
        self.proto_out.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self.proto_in.readline()
        if not line:
            return None
        return json.loads(line)

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
                result = self.grep(req["pattern"], req.get("max_matches", 50), req.get("ignore_case", False))
            except re.error as exc:
                return {"ok": False, "error": f"invalid regular expression /{req['pattern']}/: {exc}"}
            return {"ok": True, "output": repr(result), "total": result.total}
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
        timer = _cpu_timer()
        if timer and cpu_seconds:
            timer[0](float(cpu_seconds))
        try:
            try:
                outcome = self.interpreter.run(code)
            finally:
                if timer and cpu_seconds:
                    timer[1]()
        except BaseException as exc:  # the CPU timer can fire between the cell's end and disarming
            if type(exc).__name__ != "CpuTimeExceeded":
                raise
            outcome = CellOutcome(output="", error=f"the cell used more than {cpu_seconds:g} s of CPU time")
        output = outcome.output
        truncated = len(output)
        if len(output) > MAX_CELL_OUTPUT:
            output = cap_middle(output, MAX_CELL_OUTPUT)
        return {
            "ok": outcome.error is None,
            "output": output,
            "output_chars": truncated,
            "error": outcome.error,
            "notes": self.notes,
            "final": self.final_answer,
        }

    def serve(self) -> None:
        while True:
            req = self.receive()
            if req is None:
                return
            try:
                reply = self.handle(req)
            except SubCallError as exc:
                reply = {"ok": False, "error": str(exc)}
            except Exception as exc:  # a fault of ours, not of the model's code: report it, keep serving
                reply = {"ok": False, "error": f"internal error in the sandbox: {type(exc).__name__}: {exc}"}
            self.send(reply)


def _cpu_timer() -> tuple[Any, Any] | None:
    try:
        from rlm.sandbox.oslimits import arm_cpu_timer, disarm_cpu_timer
    except ImportError:
        return None
    return arm_cpu_timer, disarm_cpu_timer


# Imported before lock-down: afterwards no file can be opened, so a lazy import would fail.
_PRELOAD = ("numpy", "_strptime", "encodings.utf_16", "encodings.latin_1", "encodings.cp1252", "unicodedata")


def _preload() -> None:
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _apply_os_limits(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        from rlm.sandbox.oslimits import apply_os_limits
    except ImportError as exc:
        return {"active": [], "missing": [["os-limits", f"module unavailable: {exc}"]]}
    report = apply_os_limits(
        memory_bytes=int(spec.get("memory_bytes") or 0),
        drop_to_uid=spec.get("drop_to_uid"),
    )
    return {"active": list(report.active), "missing": [list(m) for m in report.missing]}


def main() -> None:
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
    sandbox = _apply_os_limits(spec) if spec.get("os_limits", True) else {"active": [], "missing": []}
    worker.send({"ready": True, "n_lines": worker.text.n_lines, "sandbox": sandbox})
    worker.serve()


if __name__ == "__main__":
    main()
