"""The `rlm replay` and `rlm logs` commands (registered in rlm/cli/app.py).

Exit codes: 0 shown (or, with --verify/--rerun, every step matched); 1 some
step or the answer differs, or the input changed; 3 the trace (or the input
--verify needs) is missing or unreadable. Errors are one line on stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rlm.cli.jsonout import print_json
from rlm.cli.settings_flags import with_settings_flags
from rlm.errors import ExitCode, InputError, RlmError, UsageError
from rlm.text.visible import visible
from rlm.trace.redact import redact_text


def _fail(message: str, code: int) -> None:
    print(f"rlm: {visible(redact_text(message))}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def _trace_dirs(flag: str | None) -> list[str]:
    from rlm.run.settings import load_settings, trace_dirs_to_read

    return trace_dirs_to_read(load_settings({"trace_dir": flag}))


def _resolve_trace(arg: str, trace_dir: str | None) -> Path:
    """A path; or `last` for the newest trace in the trace directory."""
    if arg == "last" and not Path(arg).exists():
        from rlm.replay.logs import latest_trace

        directories = _trace_dirs(trace_dir)
        found = latest_trace(directories)
        if found is None:
            raise InputError(f"no traces in {' or '.join(directories)}")
        return found
    return Path(arg)


def _say_ignored(ignored: dict[str, tuple[str, str]]) -> None:
    """One stderr line when the trace recorded settings the replay did not take."""
    if ignored:
        from rlm.replay.replay_settings import difference_line

        print(f"rlm: {visible(redact_text(difference_line(ignored)))}", file=sys.stderr, flush=True)


@with_settings_flags(
    "trace_dir", help={"trace_dir": "Where 'last' is looked up and --rerun writes its trace"}
)
def replay_command(
    trace: Annotated[
        str, typer.Argument(help="A trace file, or 'last' for the newest in the trace directory.")
    ],
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Re-run peek/grep/execute steps in a fresh sandbox and compare outputs."
        ),
    ] = False,
    rerun: Annotated[
        bool,
        typer.Option("--rerun", help="Re-drive the whole run from the recorded model replies (no network)."),
    ] = False,
    input_path: Annotated[
        str | None,
        typer.Option("--input", help="The input to use for --verify/--rerun instead of the recorded path."),
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Show whole previews and code.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Show a recorded investigation step by step; --verify or --rerun it."""
    trace_dir = flags["trace_dir"]
    try:
        if verify and rerun:
            raise UsageError("use --verify or --rerun, not both")
        path = _resolve_trace(trace, trace_dir)
        from rlm.replay.render import load_trace

        doc = load_trace(path)
        if verify or rerun:
            from rlm.run.settings import load_settings

            # The user's own settings (flags, environment, config): never the trace's.
            settings = load_settings({"trace_dir": trace_dir})
        if verify:
            from rlm.replay.verify import render_verify, verify_trace

            report = verify_trace(doc, input_override=input_path, trace_path=path, settings=settings)
            _say_ignored(report.ignored)
            if as_json:
                print_json(report.to_dict(), indent=1)
            else:
                render_verify(report, sys.stdout)
            raise typer.Exit(0 if report.ok else 1)
        if rerun:
            from rlm.replay.rerun import render_rerun, rerun_trace

            print(
                f"rlm: re-running {len(doc.get('steps') or [])} recorded steps (scripted replies, no network)…",
                file=sys.stderr,
                flush=True,
            )

            result = rerun_trace(doc, input_override=input_path, trace_path=path, settings=settings)
            _say_ignored(result.ignored)
            if as_json:
                print_json(result.to_dict(), indent=1)
            else:
                render_rerun(result, sys.stdout)
            raise typer.Exit(0 if result.ok else 1)
        if as_json:
            from rlm.replay.render import replay_json

            print_json(replay_json(doc, path), indent=1)
        else:
            from rlm.replay.render import render

            render(doc, path, sys.stdout, full=full)
    except KeyboardInterrupt:
        _fail("interrupted", int(ExitCode.INTERRUPTED))
    except RlmError as exc:
        _fail(exc.message, int(exc.exit_code))
    except BrokenPipeError:
        # `rlm replay t.json | head` closes the pipe early: not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@with_settings_flags("trace_dir", help={"trace_dir": "Where traces are"})
def logs_command(
    limit: Annotated[int, typer.Option("-n", "--limit", help="How many runs to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list on stdout.")] = False,
    *,
    flags: dict[str, Any],
) -> None:
    """List recent runs: time, status, cost, question, answer and trace file."""
    from rlm.replay.logs import list_runs, render_runs

    trace_dir = flags["trace_dir"]

    try:
        directories = _trace_dirs(trace_dir)
        rows = list_runs(directories, limit)
    except RlmError as exc:
        _fail(exc.message, int(exc.exit_code))
        return
    if as_json:
        print_json(rows)
        return
    if not rows:
        print(f"rlm: no traces in {' or '.join(directories)}", file=sys.stderr, flush=True)
        return
    render_runs(rows, sys.stdout)
