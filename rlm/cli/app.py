"""The `rlm` command line: parse, build Settings, call the engine, render.

No logic lives here that a test of the engine would need. Exit codes are the
documented ones (README, "Exit codes"); a usage error is click's 2.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Annotated, Any

import typer

from rlm import __version__
from rlm.cli.entry import command_began
from rlm.cli.eval_cmd import eval_command
from rlm.cli.jsonout import print_json
from rlm.cli.memory_cmd import feedback_command, memory_app
from rlm.cli.plainhelp import PlainHelp
from rlm.cli.replay_cmd import logs_command, replay_command
from rlm.cli.settings_flags import with_settings_flags
from rlm.cli.stats_cmd import stats_command
from rlm.cli.warm_cmd import warm_app
from rlm.cli.warm_start import run_began
from rlm.errors import ExitCode, InternalError, Interrupted, RlmError
from rlm.local.cli import app as local_app
from rlm.run.doubts import doubt_sentence
from rlm.text.visible import visible
from rlm.trace.redact import redact_text

app = typer.Typer(
    name="rlm",
    help="Answer questions about files far too big for any prompt (a Recursive Language Model over a sandboxed REPL).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help, as click writes it: rich's markup ate "[env …]" and labelled every flag <bool>.
    rich_markup_mode=None,
)
# `rlm local` lives in rlm.local (which does not import the CLI); its help is written the same way.
for _info in local_app.registered_commands:
    _info.cls = _info.cls or PlainHelp
app.add_typer(local_app, name="local")
app.command("replay", cls=PlainHelp)(replay_command)
app.command("logs", cls=PlainHelp)(logs_command)
app.command("stats", cls=PlainHelp)(stats_command)
app.command("eval", cls=PlainHelp)(eval_command)
app.add_typer(memory_app, name="memory")
app.command("feedback", cls=PlainHelp)(feedback_command)
app.add_typer(warm_app, name="warm")


def _version(value: bool) -> None:
    if value:
        print(f"rlm {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """rlm: ask a question of a huge file; the file never enters a prompt."""


def _die(message: str, code: int) -> None:
    print(f"rlm: {visible(redact_text(message))}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def _later_if_in_import(signum: int, frame: Any) -> bool:
    """Whether the signal landed inside Python's import machinery, where the stop it raises could
    be swallowed (a module lock's weakref callback prints "Exception ignored" and the run went
    on: seen while litellm's import ran beside the input's scan); it is then sent again shortly,
    to land outside it. A finalizer (`__del__`) swallows what it raises the same way: one that
    the import machinery ran, the signal landing just after that machinery returned to it (seen
    on loaded cores), is passed over too. The whole stack is read, not the frame it landed in:
    an extension module's import runs Python code of its own (DuckDB's builds enums), and a stop
    raised there aborts the process from inside the extension, before the trace is finished."""
    if frame is None:
        return False
    if frame.f_code.co_name != "__del__" and not _importing(frame):
        return False
    threading.Timer(0.02, os.kill, (os.getpid(), signum)).start()
    return True


def _importing(frame: Any) -> bool:
    """Whether an import is running anywhere on the stack that holds `frame`."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM (`timeout`, a service manager): stop as Ctrl-C does, and exit 143."""
    if _later_if_in_import(signum, frame):
        return
    _interrupts[0] += 1
    raise Interrupted(ExitCode.TERMINATED)


_interrupts = [0]


def _on_ctrl_c(signum: int, frame: Any) -> None:
    """First Ctrl-C: say so at once, then stop cleanly (the trace is finished). A second one
    quits at once; the workers and the local model server die with the process (PDEATHSIG)."""
    if _interrupts[0] == 0 and _later_if_in_import(signum, frame):
        return
    _interrupts[0] += 1
    if _interrupts[0] > 1:
        os.write(2, b"\nrlm: quitting now\n")
        os._exit(int(ExitCode.INTERRUPTED))
    os.write(2, "\nrlm: stopping… (Ctrl-C again to quit at once)\n".encode())
    raise Interrupted(ExitCode.INTERRUPTED)


EXIT_CODES = """Exit codes:

\b
  0  answered (status final, forced or partial)
  1  no answer could be established, or --strict withheld one not grounded or in doubt (nothing on stdout)
  2  usage error
  3  input unreadable (missing, directory, permission, FIFO without data; a remote object missing or unreachable)
  4  configuration or credentials (no model set, missing API key)
  5  provider failure after retries (a partial answer, if any, is printed)
  6  a budget limit stopped the run (the partial answer is printed)
  130  interrupted (the trace is kept)
  143  stopped by SIGTERM, e.g. by `timeout` (the trace is kept)"""


@app.command(epilog=EXIT_CODES, cls=PlainHelp)
@with_settings_flags()
def ask(
    paths_and_question: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH... QUESTION",
            help="The files to investigate (- for standard input, alone; a quoted glob is expanded by rlm; "
            "s3://, gs:// and https:// URLs, a pattern in an object's key listed by rlm), "
            "then the question in plain words. Several files are read as one text, in order (--order).",
        ),
    ],
    *,
    flags: dict[str, Any],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON document on stdout instead of the answer (answer, explanation, citations "
            "resolved to their findings, confidence, grounded and the supporting finding ids, status, "
            "usage, trace, warnings).",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress on stderr.")] = False,
    jsonl: Annotated[
        bool,
        typer.Option(
            "--jsonl",
            help="Print the run as JSON events on stdout, one per line, as it goes (rlm-events/1; the "
            "fields are in rlm/cli/events.py).",
        ),
    ] = False,
    explain: Annotated[
        bool,
        typer.Option("--explain", help="Also show how the answer was established and the findings it cites."),
    ] = False,
    explain_to: Annotated[
        str | None,
        typer.Option(
            "--explain-to",
            help="Where --explain writes: stderr (default: a pipe still gets the value alone) or stdout.",
        ),
    ] = None,
    files_from: Annotated[
        str | None,
        typer.Option(
            "--files-from",
            help="Also read the files listed in FILE, one per line (NUL-separated, as find -print0 writes, "
            "when it holds a NUL); - reads the list from standard input. The QUESTION may then be the only "
            "argument.",
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="RUN_ID",
            help="With --batch: take up the batch jobs run RUN_ID sent (its trace names them) where this "
            "run's fan-out asks the same requests, instead of sending them again; an interrupted --batch "
            "run says its RUN_ID.",
        ),
    ] = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Print the most the run could spend under its limits (model calls, tokens, dollars where "
            "the model is priced) and exit, without calling a model.",
        ),
    ] = False,
) -> None:
    """Answer QUESTION about the files at PATH... (read as one text). The answer goes to stdout;
    progress to stderr."""
    started = command_began()
    if len(paths_and_question) < (1 if files_from is not None else 2):
        _die("give the file(s) to investigate, then the question", int(ExitCode.USAGE))
    *paths, question = paths_and_question
    if files_from is not None:
        paths += _listed(files_from)
    if any("://" in p for p in paths):
        paths = _remote_named(paths)
    file = paths[0] if len(paths) == 1 else paths
    if estimate:
        _estimate(file, question, flags, as_json)
        return
    from rlm.cli.render import StderrReporter, live_wanted
    from rlm.run.events import FanOut, Progress
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    if explain_to not in (None, "stderr", "stdout"):
        _die(f"--explain-to must be stderr or stdout, not {explain_to!r}", int(ExitCode.USAGE))
    if jsonl and as_json:
        _die("--json and --jsonl both write stdout: choose one", int(ExitCode.USAGE))
    # The status line shows from the first moment, before the input is read or a model started.
    reporter = StderrReporter(quiet=quiet, live=live_wanted(sys.stderr, quiet))
    sinks: list[Progress] = [reporter]
    events = None
    if jsonl:
        from rlm.cli.events import JsonlEvents

        events = JsonlEvents(sys.stdout)
        named = [_input_name(p) for p in paths]
        events.emit("start", question=question, file=named[0] if len(named) == 1 else named)
        sinks.append(events)
    # Every sink is handed the run's one stream of events (rlm.run.events), one event at a time.
    progress = FanOut(*sinks)

    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        settings = load_settings(flags)
        run_began()  # a question is asked: a warm process may be started as this process exits
        result = run_ask(
            settings,
            file,
            question,
            progress=progress,
            stdin=sys.stdin.buffer,
            started=started,
            resume=resume,
        )
    except KeyboardInterrupt:
        reporter.close()
        _die("interrupted; the trace so far is kept", _stop_code())
        return
    except RlmError as exc:
        reporter.close()
        if events is not None:
            events.emit("error", message=exc.message, exit_code=int(exc.exit_code), trace=exc.trace_path)
        _fail(exc.message, int(exc.exit_code), as_json, reporter, exc)
        return
    except Exception as exc:  # the last resort, for what run_ask did not see
        reporter.close()
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        _fail(f"internal error ({what}); please report it", int(ExitCode.NO_ANSWER), as_json, reporter)
        return
    if Interrupted.last is not None:
        # A stop that something on the way swallowed still ends the run as a stop.
        reporter.close()
        _die("interrupted; the trace so far is kept", _stop_code())
    # The run is over: a Ctrl-C from here on ends the process with the run's own exit code
    # (the answer may already be on stdout), never by the signal.
    _exit_on_signal(result.exit_code)
    reporter.close()  # the status line goes before the answer is printed
    if as_json:
        print_json({**_result_json(result, question), "warnings": reporter.warnings})
    elif events is not None:
        events.finish(result, question, _cited(result))
    elif result.answer is not None:
        print(_shown(redact_text(result.answer), sys.stdout), flush=True)
        if explain or explain_to:
            out = sys.stdout if explain_to == "stdout" else sys.stderr
            print(_shown(redact_text(_explanation(result)), out), file=out, flush=True)
    if result.exit_code != 0:
        reporter.error(result.message)
    elif result.status != "final":
        reporter.warn(result.message)
    if result.grounded is False and result.status != "withheld":  # a withheld answer's error says it
        reporter.warn(ungrounded_note(result))
    elif getattr(result, "doubts", None) and result.status != "withheld":
        reporter.warn(doubt_note(result.doubts))
    reporter.summary(result)
    raise typer.Exit(result.exit_code)


def _listed(source: str) -> list[str]:
    """The paths a --files-from list names: one per line, or NUL-separated when it holds a NUL
    (names with newlines in them); blank entries skipped. One line and exit 3 when the list
    cannot be read, exit 2 when it names nothing."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(source, "rb") as handle:
                data = handle.read()
    except OSError as exc:
        _die(f"--files-from {source}: {exc.strerror or exc}", int(ExitCode.INPUT))
    entries = data.split(b"\0") if b"\0" in data else data.splitlines()
    paths = [os.fsdecode(e.rstrip(b"\r") if b"\0" not in data else e) for e in entries]
    paths = [p for p in paths if p.strip()]
    if not paths:
        _die(f"--files-from {source}: the list names no file", int(ExitCode.USAGE))
    return paths


def _remote_named(paths: list[str]) -> list[str]:
    """The inputs as given; the credentials written into a remote input's URL (a signed URL's
    signature, a password) registered first, so that nothing rlm writes shows them."""
    from rlm.input.remote import url_secrets
    from rlm.trace.redact import register_secret

    for path in paths:
        for value in url_secrets(path):
            register_secret(value)
    return paths


def _input_name(path: str) -> str:
    """An input as the events name it: a remote one by its URL without credentials."""
    if "://" not in path:
        return path
    from rlm.input.remote import is_remote, shown

    return shown(path) if is_remote(path) else path


def _estimate(file: str | list[str], question: str, flags: dict[str, Any], as_json: bool) -> None:
    """`rlm ask --estimate`: the bounds of the run on stdout (rlm.api.estimate), no model called."""
    from rlm.api.estimate import estimate

    if not isinstance(file, str):
        _die("--estimate reads one input: give one file", int(ExitCode.USAGE))
        return

    given = {k: v for k, v in flags.items() if k not in ("model", "sub_model")}
    source: Any = sys.stdin.buffer if file == "-" else file
    try:
        found = estimate(
            source, question, model=flags.get("model"), sub_model=flags.get("sub_model"), **given
        )
    except RlmError as exc:
        _die(exc.message, int(exc.exit_code))
        return
    if as_json:
        print_json(found.to_dict())
    else:
        print(visible(found.text()), flush=True)
    raise typer.Exit(0)


@app.command("mcp", cls=PlainHelp)
@with_settings_flags()
def mcp_command(
    *,
    flags: dict[str, Any],
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="DIR",
            help="A directory whose files clients may read (repeatable), beside the roots a stdio client declares.",
        ),
    ] = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Serve streamable HTTP on HOST:PORT (loopback only, bearer token) instead of stdio.",
        ),
    ] = None,
    max_runs: Annotated[
        int,
        typer.Option(
            "--max-runs",
            metavar="N",
            help="Runs (asks) at once; calls past it wait their turn. Default 2.",
        ),
    ] = 2,
) -> None:
    """Serve rlm to coding agents over MCP (stdio; --http for streamable HTTP): the tools ask,
    estimate, stats, replay and memory. The model and limits are this command's settings; a
    client may only lower a limit."""
    from rlm.cli.warm_start import start_unasked
    from rlm.mcp.server import serve

    # Each run is a process of its own that imports litellm unless a warm process takes it: one
    # is started as serving begins, while the client is still getting ready.
    try:
        serve(flags, allow or [], http, max_runs, serving=lambda: start_unasked(dict(os.environ)))
    except RlmError as exc:
        _die(exc.message, int(exc.exit_code))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _stop_code() -> int:
    """130 for Ctrl-C, 143 for SIGTERM: the code of the signal that stopped the run."""
    return Interrupted.last or int(ExitCode.INTERRUPTED)


def _fail(message: str, code: int, as_json: bool, reporter: Any, exc: RlmError | None = None) -> None:
    """An error that ended the run: one line on stderr, and the --json document."""
    trace = exc.trace_path if exc is not None else None
    if as_json:
        status = "crashed" if exc is None or isinstance(exc, InternalError) else "error"
        print_json(
            {
                "answer": None,
                "status": status,
                "exit_code": code,
                "error": message,
                "trace": trace,
                "warnings": reporter.warnings,
            }
        )
    _die(message, code)


def _flush_and_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _exit_on_signal(code: int) -> None:
    def handler(signum: int, frame: Any) -> None:
        _flush_and_exit(code)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _cited(result: Any) -> list[dict[str, str]]:
    by_id = {f.id: f for f in result.findings}
    return [
        {"id": fid, "text": by_id[fid].full or by_id[fid].text, "evidence": by_id[fid].evidence}
        for fid in result.citations
        if fid in by_id
    ]


def ungrounded_note(result: Any) -> str:
    """What stderr says of an answer whose values no finding the synthesis was shown holds."""
    return (
        "the answer states a value found in no finding the synthesis was shown (not grounded"
        f"{', confidence ' + result.confidence if result.confidence else ''}): check it with `rlm replay last`"
    )


def doubt_note(doubts: list[str]) -> str:
    """What stderr says of an answer whose query leaves it in doubt (rlm.run.doubts)."""
    return f"{doubt_sentence(doubts)} (confidence low): check it with `rlm replay last`"


def _explanation(result: Any) -> str:
    lines = ["", f"Why: {result.explanation}" if result.explanation else "Why: (no explanation was given)"]
    for c in _cited(result):
        lines.append(f"[{c['id']}] ({c['evidence']}) {c['text']}")
    return "\n".join(lines)


def _result_json(result: Any, question: str) -> dict[str, Any]:
    return {
        "answer": result.answer,
        "explanation": result.explanation,
        "citations": _cited(result),
        "confidence": result.confidence,
        "grounded": result.grounded,
        "supporting": result.supporting,
        "doubts": list(getattr(result, "doubts", None) or []),
        "status": result.status,
        "exit_code": result.exit_code,
        "message": result.message,
        "question": question,
        "findings": [
            {"id": f.id, "kind": f.kind, "text": f.text, "evidence": f.evidence, "node": f.node}
            for f in result.findings
        ],
        "usage": result.usage,
        "steps": result.steps,
        "elapsed_s": round(result.elapsed_s, 3),
        "largest_prompt_tokens": result.largest_prompt,
        "trace": result.trace_path,
        **_mode_json(result),
    }


def _mode_json(result: Any) -> dict[str, Any]:
    """How the run answered: `mode`, and for a plain call what of the input it was shown
    (`plain`: lines, shown_lines, cut and the note said on stderr)."""
    from rlm.run.plain import PlainResult

    if isinstance(result, PlainResult):
        return {"mode": "plain", "plain": result.excerpt.to_dict() if result.excerpt else None}
    return {"mode": "rlm"}


def _shown(text: str, out: Any) -> str:
    """Text from the file or a model as written to `out`: the exact value into a pipe (a script
    gets the bytes the answer holds); control characters made visible on a terminal, and always
    on stderr, which is for a person."""
    if out is sys.stdout and not (hasattr(out, "isatty") and out.isatty()):
        return text
    return visible(text)


def main() -> None:
    """The entry point. The process ends as soon as the command is done: the exit handlers run,
    the streams are flushed, and the interpreter's slow teardown of litellm (over a second) is
    skipped, so nothing happens between the last line and the exit status."""
    try:
        app()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    _flush_and_exit(code)


if __name__ == "__main__":
    main()
