"""`rlm eval TASKS.jsonl`: the instrument to choose a model, and to check our own changes."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer

from rlm.cli.evaluate import TaskResult, check_tasks_arg, load_tasks, report, run_tasks
from rlm.cli.jsonout import print_json
from rlm.cli.settings_flags import with_settings_flags
from rlm.errors import ExitCode, RlmError
from rlm.text.visible import visible

BASELINES = ("plain",)


@with_settings_flags(
    "model", "sub_model", "api_base", "protocol", "mode", "max_steps", "max_time", "trace_dir"
)
def eval_command(
    tasks_file: Annotated[
        str, typer.Argument(metavar="TASKS", help="A JSON-lines tasks file (see rlm/cli/evaluate.py).")
    ],
    *,
    flags: dict[str, Any],
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            metavar="BASELINE",
            help="Also answer every task by one plain call (plain: the input's text as far as it fits the "
            "window), with the same model and settings, and report both side by side.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON document.")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress on stderr.")] = False,
) -> None:
    """Run every task through the engine of `rlm ask` and score what it would print, strictly.
    Exit 0 when every task passed, 1 when some failed (the baseline's results do not count)."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask, shared_local_server

    if baseline is not None and baseline not in BASELINES:
        print(f"rlm: --baseline must be one of {', '.join(BASELINES)}, not {baseline!r}", file=sys.stderr)
        raise typer.Exit(int(ExitCode.USAGE))
    try:
        tasks = load_tasks(check_tasks_arg(tasks_file))
        # Each task is scored on its own: nothing remembered from an earlier task (or run).
        settings = load_settings({**flags, "no_memory": True})
    except RlmError as exc:
        print(f"rlm: {exc.message}", file=sys.stderr)
        raise typer.Exit(int(exc.exit_code)) from None

    def progress(r: TaskResult) -> None:
        if not quiet:
            mark = "pass" if r.passed else "FAIL"
            print(f"rlm eval: {visible(r.id)} {mark} ({r.seconds:.1f} s)", file=sys.stderr, flush=True)

    def progress_baseline(r: TaskResult) -> None:
        if not quiet and r.baseline is not None:
            mark = "pass" if r.baseline.passed else "FAIL"
            print(
                f"rlm eval: {visible(r.id)} plain {mark} ({r.baseline.seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )

    # The baseline arm: the same settings, the mode alone changed.
    plain = replace(settings, mode="plain")
    try:
        # One local model server for the whole evaluation, when the model is the local one.
        with shared_local_server(settings) as local:
            results = run_tasks(
                tasks,
                lambda t: run_ask(settings, str(t.file), t.question, local_endpoint=local),
                progress,
                baseline=(lambda t: run_ask(plain, str(t.file), t.question, local_endpoint=local))
                if baseline
                else None,
                on_baseline=progress_baseline,
            )
    except RlmError as exc:  # the shared server could not start
        print(f"rlm: {exc.message}", file=sys.stderr)
        raise typer.Exit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        print("rlm: interrupted", file=sys.stderr)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    doc = report(results)
    if as_json:
        print_json(doc)
    else:
        _print_table(results, doc)
    raise typer.Exit(0 if doc["passed"] == doc["total"] else 1)


def _print_table(results: list[TaskResult], doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    arms = "baseline" in doc
    columns = ["id", "pass", "grounded", *(["plain"] if arms else []), "expected", "got"]
    table = Table(*columns, "steps", "tokens", "cost", "time", box=None)
    for r in results:
        got = r.got if r.got is not None else f"({r.status}{': ' + r.error if r.error else ''})"
        # The baseline's pass beside the run's; its answers and grounding are in --json.
        plain = [("-" if r.baseline is None else "yes" if r.baseline.passed else "NO")] if arms else []
        # The answers are a model's text and the tasks a file's: shown made visible, never as markup.
        table.add_row(
            Text(visible(r.id)),
            "yes" if r.passed else "NO",
            {True: "yes", False: "no", None: "-"}[r.grounded],
            *plain,
            Text(_short(json.dumps(r.expected) if not isinstance(r.expected, str) else r.expected)),
            Text(_short(got)),
            str(r.steps),
            f"{r.tokens:,}",
            "-" if r.cost is None else f"${r.cost:.4f}",
            f"{r.seconds:.1f} s",
        )
    console = Console(soft_wrap=False)
    console.print(table)
    cost = "unknown" if doc["cost"] is None else f"${doc['cost']:.4f}"
    console.print(
        f"{doc['passed']}/{doc['total']} passed ({doc['accuracy']:.0%}) · "
        f"{doc['grounded']}/{doc['total']} grounded ({doc['grounded_rate']:.0%}) · "
        f"{doc['confident_wrong']} grounded and wrong · median {doc['median_tokens']:,} tokens, "
        f"{doc['median_seconds']:.1f} s · cost {cost}"
    )
    if arms:
        console.print(
            f"plain baseline: {doc['baseline_passed']}/{doc['total']} passed ({doc['baseline_accuracy']:.0%}) · "
            f"{doc['baseline_grounded']}/{doc['total']} grounded ({doc['baseline_grounded_rate']:.0%}) · "
            f"{doc['baseline_confident_wrong']} grounded and wrong"
        )


def _short(text: str, n: int = 40) -> str:
    one = visible(" / ".join(text.splitlines()))
    return one if len(one) <= n else one[: n - 1] + "…"
