"""Wiring one `rlm ask`: input, model (local server if asked), trace, engine, result.

The CLI calls `run_ask` and renders what it returns; tests call it directly.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from rlm.errors import ConfigError, ExitCode, InternalError, Interrupted, RlmError, UsageError
from rlm.input.snapshot import change_of
from rlm.input.source import Profile
from rlm.input.tables import build_progress
from rlm.memory.recall import Recall, offer_lines, offer_parts
from rlm.memory.store import Kept, Memory
from rlm.model.budget import BudgetExceeded
from rlm.model.client import ModelClient, await_litellm, load_litellm, load_litellm_in_background
from rlm.model.deployments import Deployment, build_router, resolve_keys
from rlm.run.batch import check_batch_api, resumable
from rlm.run.cassette import Cassette, record_calls
from rlm.run.doubts import doubt_sentence
from rlm.run.engine import Engine, RunResult
from rlm.run.events import (
    FanOut,
    InputRead,
    Phase,
    Progress,
    ProviderEventsTrace,
    RunWarning,
    TableBuild,
    no_progress,
)
from rlm.run.ledger import Finding
from rlm.run.plain import PlainRun, chooses_plain
from rlm.run.remote_child_run import investigate_child
from rlm.run.settings import Settings, default_trace_dir, load_model_list, request_timeout_for, trace_dir_for
from rlm.trace.redact import redact_text, register_secret, register_url_secrets, url_without_secrets
from rlm.trace.retention import sweep_if_due
from rlm.trace.writer import TraceWriter

LOCAL = "local"


def _client(
    settings: Settings,
    model: str,
    *,
    api_base: str | None,
    api_key: str | None,
    window: int | None,
    local: bool = False,
    router: Any = None,
    deployments: Sequence[Deployment] = (),
    fallbacks: Sequence[tuple[str, Sequence[Deployment]]] = (),
) -> ModelClient:
    return ModelClient(
        model,
        api_base=api_base,
        api_key=api_key,
        request_timeout=request_timeout_for(settings, local=local),
        retries=settings.retries,
        retry_base_delay=settings.retry_base_delay,
        temperature=settings.temperature,
        context_window=window,
        small=local,
        router=router,
        deployments=deployments,
        fallbacks=fallbacks,
    )


def _described(d: Deployment) -> dict[str, Any]:
    """A deployment as the trace records it: its endpoint's URL without credentials."""
    out = d.describe()
    if "api_base" in out:
        out["api_base"] = url_without_secrets(out["api_base"])
    return out


def resolve_model_name(settings: Settings) -> str:
    """The model to use: the configured one, else the local model when it is installed."""
    if settings.model:
        return settings.model
    from rlm.local import installed_gguf

    if installed_gguf(settings.gguf) is not None:
        return LOCAL
    raise ConfigError(
        "no model configured: pass -m MODEL (e.g. -m gpt-4o-mini), set RLM_MODEL, "
        "or install the offline model with `rlm local setup`"
    )


def _uses_local(settings: Settings) -> bool:
    name = resolve_model_name(settings)
    return LOCAL in (name, settings.sub_model or name)


@contextlib.contextmanager
def _local_server(settings: Settings) -> Iterator[Any]:
    from rlm.local import installed_gguf, local_server

    gguf = installed_gguf(settings.gguf)
    if gguf is None:
        raise ConfigError("the local model is not installed: run `rlm local setup` (or pass --gguf PATH)")
    with local_server(gguf) as endpoint:
        yield endpoint


@contextlib.contextmanager
def shared_local_server(settings: Settings) -> Iterator[Any | None]:
    """For many runs in a row (`rlm eval`): the local model's server, started once and handed to
    each run_ask (`local_endpoint`), or None when the settings name no local model. Each run
    otherwise starts its own; one server also keeps the prompt prefixes runs share (the system
    prompt, a file's text in plain mode) in its cache from one run to the next."""
    if not _uses_local(settings):
        yield None
        return
    with _local_server(settings) as endpoint:
        yield endpoint


@contextlib.contextmanager
def open_models(
    settings: Settings, local_endpoint: Any = None, *, deadline: float | None = None
) -> Iterator[tuple[ModelClient, ModelClient]]:
    """Root and sub-model clients; starts (and always stops) a local server when asked for,
    unless one already running is given (`local_endpoint`, from shared_local_server). With a
    `deadline` (--max-time), litellm's import under way is waited for until then at most."""
    register_secret(settings.api_key)
    name = resolve_model_name(settings)
    sub_name = settings.sub_model or name
    models = load_model_list()
    # The groups the run's calls go to, and those they may fall back to (their keys checked now).
    grouped = models.with_fallbacks({name, sub_name}) if models is not None else set()
    router = None
    if models is not None and grouped:
        for secret in resolve_keys(models, grouped):
            register_secret(secret)
        for d in models.deployments:
            register_url_secrets(d.api_base)
        # One Router for the run: the root's and the sub-calls' calls share what it learns
        # (a deployment cooling down, the calls each one has in flight).
        router = build_router(models, settings.router_strategy, request_timeout_for(settings, local=False))
    with contextlib.ExitStack() as stack:
        endpoint = None
        if LOCAL in (name, sub_name):
            endpoint = local_endpoint or stack.enter_context(_local_server(settings))

        def make(model_name: str) -> ModelClient:
            if models is not None and model_name in grouped:
                return _client(
                    settings,
                    model_name,
                    api_base=None,
                    api_key=None,
                    window=None,
                    router=router,
                    deployments=models.of(model_name),
                    fallbacks=[(g, models.of(g)) for g in models.fallbacks.get(model_name, ())],
                )
            if model_name == LOCAL and endpoint is not None:
                return _client(
                    settings,
                    endpoint.model,
                    api_base=endpoint.api_base,
                    api_key=getattr(endpoint, "api_key", None),
                    window=endpoint.n_ctx,
                    local=True,
                )
            return _client(
                settings, model_name, api_base=settings.api_base, api_key=settings.api_key, window=None
            )

        await_litellm(deadline, settings.max_time)
        root = make(name)
        sub = root if sub_name == name else make(sub_name)
        for client in {id(root): root, id(sub): sub}.values():
            client.check_credentials()
        # Pay litellm's import (seconds) here, not inside the first step's timing.
        load_litellm()
        yield root, sub


# From this size on, litellm's import (seconds of CPU, all of it holding the GIL) runs in a thread
# of its own beside the input's profile, table and summary, whose DuckDB and numpy work leave the
# GIL: the model's first request comes sooner. Medians of the first request, 6 runs each arm in
# turn (2 cores, a test run beside the 50 MB pairs), import in a thread from 64 MB -> from 1 MB:
# 8 MB CSV 3.19 -> 2.82 s, 8 MB access log 3.00 -> 2.89 s, 50 MB CSV 4.11 -> 3.49 s, 50 MB access
# log 3.74 -> 3.47 s. Below it the thread only competes with the run for the GIL: measured on a
# 0.3 MB log, as fast and 0.3 s more CPU.
_OVERLAP_IMPORT_BYTES = 1 << 20


def _profile_takes_seconds(input_arg: str | Sequence[str]) -> bool:
    """Whether the inputs named are regular files big enough for their profile to take seconds."""
    total = 0
    for arg in [input_arg] if isinstance(input_arg, str) else input_arg:
        try:
            total += os.stat(arg).st_size if os.path.isfile(arg) else 0
        except (OSError, ValueError):
            continue
    return total >= _OVERLAP_IMPORT_BYTES


def run_ask(
    settings: Settings,
    input_arg: str | Sequence[str],
    question: str,
    *,
    progress: Progress | None = None,
    stdin: Any = None,
    started: float | None = None,
    cassette: Cassette | None = None,
    local_endpoint: Any = None,
    resume: str | None = None,
) -> RunResult:
    """Answer `question` about the input; every outcome, even Ctrl-C or a bug, leaves a trace.

    `started` is when the user's command began: --max-time counts from there. With a
    `cassette` (`rlm replay --rerun`), its recorded replies answer every model call. With a
    `local_endpoint` (shared_local_server), the local model is asked there, no server started.
    `resume` (--batch --resume RUN_ID): the run whose batch jobs this one takes up (rlm.run.batch).
    """
    from rlm.input.parts import open_inputs, read_summary
    from rlm.input.timerange import parse_range
    from rlm.input.walk import WalkRules

    question = question.strip()
    if not question:
        raise UsageError("the question is empty")
    time_range = parse_range(settings.since, settings.until)
    if time_range is not None:  # recorded resolved: `2h` is the two hours before this run
        bounds = time_range.to_dict()
        settings = replace(settings, since=bounds["since"], until=bounds["until"])
    started = time.monotonic() if started is None else started
    # A run id that names no run with a job is the user's mistake (exit 2): said before any trace.
    offer = resumable(settings, resume) if resume is not None else None
    trace = TraceWriter(
        trace_dir_for(settings) if settings.trace else None,
        on_problem=lambda message: report(RunWarning(message)),
    )
    # The run's one event stream: the trace keeps the provider's events, then the caller's sinks.
    report: Progress = FanOut(ProviderEventsTrace(trace, started), progress or no_progress)
    trace.flush()  # a directory that cannot take the trace is said now, not at the end
    if offer is not None:
        trace.update(resume=offer)  # what the run's fan-outs may take up (rlm.run.batch)
    engine: Engine | PlainRun | None = None
    memory: Recall | None = None
    try:
        report(Phase("reading the input"))
        # litellm's import overlaps the input's profile, and a big table's build waits for it.
        # Under --max-time it is always in a thread of its own, so that the wait for it has an
        # end (open_models): an import cannot be stopped, a wait can.
        big = _profile_takes_seconds(input_arg)
        imported = load_litellm_in_background() if big or settings.max_time is not None else None
        inputs = [input_arg] if isinstance(input_arg, str) else list(input_arg)
        with (
            build_progress(lambda done, size, secs: report(TableBuild.of(done, size, secs))),
            open_inputs(
                inputs,
                cache_dir=settings.cache_dir,
                stdin=stdin,
                order=settings.order,
                skip_bad=settings.skip_bad,
                walk=WalkRules.parse(settings.include, settings.exclude, settings.max_file_mb),
                time_range=time_range,
                # A big file's table builds while the model's first turn starts: sql() waits
                # for it, nothing else does (rlm.input.tablejob).
                background_table=True,
                build_after=imported if big else None,
            ) as source,
        ):
            profile = source.profile
            if not settings.no_memory and _may_recall(settings, profile):
                # The memory's recall, after the model client loads, will wait for the whole
                # sha256: it runs beside the load, not after the table's build.
                profile.hash_now()
            # Else the summary comes with the table (Engine.table_news), made after the line index.
            if profile.table_job is None and profile.index_job is None:
                from rlm.input.summary import summary_or_warn  # stats and DuckDB: only when a summary is made

                profile = source.profile = replace(profile, summary=summary_or_warn(profile, trace.warn))
            summary = read_summary(profile)  # several inputs: what was read, what was skipped
            if summary is not None and profile.skipped:  # a part left out is the user's to know
                trace.warn(summary)
                report(RunWarning(summary))
            elif summary is not None:
                report(InputRead(summary))
            # The sha256 of a file seen for the first time is still being computed: it is
            # recorded when known, and the run does not wait for it to start.
            recorded = _recorded(profile)
            trace.update(question=question, settings=settings.affecting_results(), input=recorded)
            if profile.binary:
                note = (
                    f"{profile.display_name} looks binary (it holds NUL bytes): it is investigated as text, "
                    "control bytes shown as '.'"
                )
                trace.warn(note)
                report(RunWarning(note))
            if profile.snapshot:
                note = profile.appended_note()
                trace.warn(note)
                report(RunWarning(note))
            if profile.table_error:
                note = f"no table for {profile.display_name}: {profile.table_error}; sql() is unavailable in this run"
                trace.warn(note)
                report(RunWarning(note))
            for note in profile.warnings:  # the cache's: a damaged entry rebuilt, a folder not used
                trace.warn(note)
                report(RunWarning(note))
            try:
                report(
                    Phase(
                        "starting the model"
                        if settings.model in (None, "local")
                        else "loading the model client"
                    )
                )
                with (
                    open_models(settings, local_endpoint, deadline=_deadline(settings, started))
                    if cassette is None
                    else cassette.models() as (
                        root,
                        sub,
                    )
                ):
                    trace.update(models={"root": root.model, "sub": sub.model})
                    deployments = {d.id: _described(d) for c in (root, sub) for d in c.all_deployments}
                    if deployments:
                        trace.update(deployments=list(deployments.values()))
                    # The seam of --mode: one direct call (rlm.run.plain), or the investigation.
                    plain = chooses_plain(settings.mode, profile, root)
                    trace.update(mode="plain" if plain else "rlm")
                    if settings.batch and not plain and cassette is None:
                        check_batch_api(sub)  # a provider without a Batch API: exit 4, nothing sent
                    if plain:
                        profile = profile.with_table()  # a plain call is one prompt: it has no later turn
                        # A plain call reads no memory and leaves none: it has no findings to cite.
                        # rlm's own trace folder is still kept bounded, as _recall does it.
                        sweep_if_due(default_trace_dir())
                        engine = PlainRun(
                            settings,
                            profile=profile,
                            question=question,
                            model=root,
                            trace=trace,
                            progress=report,
                        )
                    else:
                        memory = _recall(settings, profile, source.path, question, trace, report, started)
                        now = time.time()  # one age for a memory's line in the prompt and in the synthesis
                        engine = Engine(
                            settings,
                            path=source.path,
                            profile=profile,
                            question=question,
                            root_model=root,
                            sub_model=sub,
                            trace=trace,
                            progress=report,
                            memories=[_as_finding(m, now) for m in memory.offered] if memory else None,
                            memory_lines=offer_lines(memory.offered, now) if memory else None,
                            subcall_cache=memory.store if memory and not settings.no_cache else None,
                            child_runner=investigate_child,
                        )
                    engine.budget.count_from(started)
                    _attach(engine, root, sub, settings, trace, report)
                    result = _strict(settings, engine.run())
                    result.elapsed_s = time.monotonic() - started  # the user's wall clock
                    if isinstance(engine, Engine):
                        # The line index a big file's run began without (a model that answered
                        # before any action never waited for it): the trace records its count.
                        engine.index_wait()
                        profile = engine.profile
                        recorded = {**_recorded(profile), "sha256": recorded["sha256"]}
                    changed = _changed(profile, trace, report)
                    if memory is not None and isinstance(engine, Engine) and not changed:
                        _keep(memory, engine, result, profile, question, trace, report)
                    elif memory is not None:
                        note = "the input changed during the run: nothing of this run is kept in memory"
                        trace.warn(note)
                        report(RunWarning(note))
                    if memory is not None:
                        memory.store.close()
                if isinstance(engine, Engine):  # a table built as the run went says how that went
                    recorded["table_error"] = engine.profile.table_error
                trace.update(input={**recorded, "sha256": profile.sha256})
            finally:
                if engine is not None:
                    engine.close()
                if recorded["sha256"] is None and profile.digest.done():
                    trace.update(input={**recorded, "sha256": profile.sha256})
    except BudgetExceeded as exc:  # the limit came before the run could start (open_models)
        before = "; nothing was established before it" if engine is None else ""
        result = RunResult(None, "budget", int(ExitCode.BUDGET), f"{exc.detail}{before}")
        result.stop, result.elapsed_s = "budget", time.monotonic() - started
        result.trace_path = str(trace.path) if trace.path else None
    except KeyboardInterrupt as exc:
        _finish(trace, engine, memory, "interrupted", _stop_code(exc), None, started)
        raise
    except RlmError as exc:
        _stop_if_asked(trace, engine, memory, started)
        _finish(trace, engine, memory, "error", int(exc.exit_code), None, started, error=exc.message)
        exc.trace_path = str(trace.path) if trace.path else None
        raise
    except Exception as exc:
        _stop_if_asked(trace, engine, memory, started)
        # The last resort: a bug ends in one line and exit 1; the traceback goes to the trace.
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        _finish(
            trace,
            engine,
            memory,
            "crashed",
            int(ExitCode.NO_ANSWER),
            None,
            started,
            error=what,
            traceback="".join(traceback.format_exception(exc))[-8000:],
        )
        where = f" with the trace {trace.path}" if trace.path else ""
        err = InternalError(f"internal error ({what}); please report it{where}")
        err.trace_path = str(trace.path) if trace.path else None
        raise err from exc
    _finish(trace, engine, memory, result.status, result.exit_code, result, started)
    return result


def _deadline(settings: Settings, started: float) -> float | None:
    """When --max-time ends the run, on the clock of time.monotonic()."""
    return None if settings.max_time is None else started + settings.max_time


def _strict(settings: Settings, result: RunResult) -> RunResult:
    """--strict: an answer that is not grounded, or whose query left out a condition the
    question names (`doubts`), is withheld. Nothing goes to stdout and the run exits 1, as when
    no answer could be established; the message, on stderr and in the trace, says why and
    still shows the answer (one line) to the person who reads it."""
    if not settings.strict or result.answer is None or (result.grounded is not False and not result.doubts):
        return result
    shown = " / ".join(line.strip() for line in result.answer.splitlines() if line.strip())
    why = "not grounded" if result.grounded is False else doubt_sentence(result.doubts)
    message = f"the answer was withheld as {why} (--strict): {shown}"
    return replace(result, answer=None, status="withheld", exit_code=int(ExitCode.NO_ANSWER), message=message)


def _recorded(profile: Profile) -> dict[str, Any]:
    """The profile as the trace's `input` records it: its sha256 None while still computed."""
    return {k: v for k, v in profile.to_dict(wait=False).items() if k != "index_path"}


def _changed(profile: Profile, trace: TraceWriter, report: Progress) -> bool:
    """Whether the input changed during the run (rlm.input.snapshot), said when it did: a run
    over a changed file, or over a copy of a growing one, keeps nothing in memory, whose
    findings would stand as established facts about a file that no longer holds them."""
    from rlm.input.parts import changed_parts

    for message in changed_parts(profile):  # several inputs: the files the text was joined from
        trace.warn(message)
        report(RunWarning(message))
        return True
    change = None
    if profile.identity is not None and not profile.snapshot:
        change = change_of(profile.path, profile.identity)
        if change is not None:
            message = change.message(profile.display_name)
            trace.warn(message)
            report(RunWarning(message))
    return change is not None or profile.snapshot


def _stop_code(exc: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM (rlm.errors.Interrupted carries which)."""
    return int(getattr(exc, "exit_code", 0) or Interrupted.last or ExitCode.INTERRUPTED)


def _stop_if_asked(
    trace: TraceWriter, engine: Engine | PlainRun | None, memory: Recall | None, started: float
) -> None:
    """A stop asked for by a signal that a library turned into an error of its own (DuckDB:
    "Query interrupted") ends the run as the stop it is, never as an error or a crash."""
    if Interrupted.last is not None:
        _finish(trace, engine, memory, "interrupted", Interrupted.last, None, started)
        raise Interrupted.again() from None


def _attach(
    engine: Engine | PlainRun,
    root: ModelClient,
    sub: ModelClient,
    settings: Settings,
    trace: TraceWriter,
    report: Progress,
) -> None:
    """Bind the model clients to the run: its clock and cost limit, and where retries are told
    (the run's event stream, whose trace sink keeps them)."""
    failed: dict[str, Any] = {}  # one failure decision per provider for the whole run
    for client in {id(root): root, id(sub): sub}.values():
        client.attach(engine.budget, report, failed)
    record_calls(trace, root, sub)
    if settings.max_cost is not None:
        reserve = root.cost_bound(engine.budget.synthesis_tokens, settings.reply_max_tokens)
        engine.budget.answer_cost_reserve = reserve or 0.0


def _finish(
    trace: TraceWriter,
    engine: Engine | PlainRun | None,
    memory: Recall | None,
    status: str,
    code: int,
    result: RunResult | None,
    started: float,
    error: str | None = None,
    traceback: str | None = None,
) -> None:
    fields: dict[str, Any] = {
        "status": status,
        "exit_code": code,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if error:
        fields["error"] = error
    if traceback:
        fields["traceback"] = traceback
    if engine is None:  # ended before the run began: its time is still the user's to see
        fields["totals"] = {"elapsed_s": round(time.monotonic() - started, 3)}
    else:
        fields["ledger"] = engine.ledger.to_list()
        fields["totals"] = {
            **engine.budget.usage.to_dict(),
            "steps": engine.steps_total,
            "nodes": engine.nodes_started,
            "sandbox_restarts": engine.restarts,
            "largest_prompt_tokens": engine.largest_prompt,
            "elapsed_s": round(time.monotonic() - started, 3),
        }
    if result is not None:
        fields["answer"] = result.answer
        fields["message"] = result.message
        if result.status == "provider_error":
            fields["error"] = result.message
        if result.stop is not None:
            fields["stop"] = result.stop
    if memory is not None:
        # The memory's one record, written once the run is over, whichever way it ended.
        fields["memory"] = _memory_record(memory, engine if isinstance(engine, Engine) else None)
    trace.update(**fields)
    trace.close()  # every way a run ends comes here: its event log becomes the document


# -- memory (rlm.memory) -------------------------------------------------------------------------


def _may_recall(settings: Settings, profile: Profile) -> bool:
    """Whether memory may hold memories of this input (one file; several are hashed as read)."""
    from rlm.memory.recall import may_recall
    from rlm.memory.store import default_memory_path

    if profile.parts is not None:
        return False
    return may_recall(str(settings.memory or default_memory_path()), profile.path, profile.size)


def _recall(
    settings: Settings,
    profile: Profile,
    path: str,
    question: str,
    trace: TraceWriter,
    report: Progress,
    started: float,
) -> Recall | None:
    """Open the memory and find what this question needs of it about this input: only memories
    kept before the run started (`started`, the monotonic clock when the user's command began),
    so a run never sees those of a run that was still going when it began. Memory never stops a
    run: a database that cannot be used is said once, and the run goes on without it."""
    from rlm.run.settings import default_trace_dir
    from rlm.trace.retention import sweep_if_due

    sweep_if_due(default_trace_dir())  # rlm's own trace folder kept bounded, checked once a day
    if settings.no_memory:
        return None
    from rlm.memory.recall import recall
    from rlm.memory.relevance import FileTerms
    from rlm.memory.store import MemoryStore, default_memory_path

    # Reading the input, starting a model and hashing the file all come between the start and
    # this read: a run finishing meanwhile must not appear in this one.
    began = time.time() - (time.monotonic() - started)
    table = profile.table or {}
    terms = FileTerms.of(
        [str(c[0]) for c in table.get("columns") or []],
        {str(k): [v[0] for v in pairs] for k, pairs in (table.get("values") or {}).items()},
    )
    where = settings.memory or default_memory_path()
    try:
        store = MemoryStore(where)
        found = recall(
            store,
            path=path,
            size=profile.size,
            sha256=lambda: profile.sha256,
            question=question,
            terms=terms,
            before=began,
        )
    except (sqlite3.Error, OSError) as exc:
        message = f"the memory {where} cannot be used ({exc}); this run neither reads nor adds to it"
        trace.warn(message)
        report(RunWarning(message))
        return None
    return found


def _as_finding(memory: Memory, now: float) -> Finding:
    """An offered memory as a finding the synthesis may cite: its text cut as the root's prompt
    shows it, and, as where it comes from, its age, question and standing (rlm's words, not
    evidence). No `full`: what the synthesis shows whole of a finding of this run, it never shows
    of another question's result."""
    about, text = offer_parts(memory, now)
    return Finding(
        id=memory.ref, kind="memory", text=text, evidence=f"memory {memory.ref}, {about}", node="n0"
    )


def _keep(
    memory: Recall,
    engine: Engine,
    result: RunResult,
    profile: Profile,
    question: str,
    trace: TraceWriter,
    report: Progress,
) -> None:
    """Store the findings the answer cited, each with the standing the run gave it (the
    synthesis's confidence, whether the answer was grounded and whether this finding holds its
    values); record what was offered and cited (for feedback)."""
    from rlm.memory.recall import keep

    by_id = {f.id: f for f in engine.ledger.entries}
    cited = [by_id[c] for c in result.citations if c in by_id]
    supporting = set(result.supporting)
    try:
        keep(
            memory,
            run_id=trace.run_id,
            input_sha=profile.sha256,
            input_size=profile.size,
            # What outlives the run holds no secret of the environment a model echoed.
            question=redact_text(question),
            cited=[
                Kept(
                    redact_text(f.full or f.text),
                    redact_text(f.evidence),
                    answer_confidence=result.confidence,
                    answer_grounded=result.grounded,
                    holds_answer=None if result.grounded is None else f.id in supporting,
                )
                for f in cited
            ],
            cited_refs=[c for c in result.citations if c.startswith("M")],
        )
    except sqlite3.Error as exc:
        message = f"the memory {memory.store.path} could not be written ({exc})"
        trace.warn(message)
        report(RunWarning(message))


def _memory_record(memory: Recall, engine: Engine | None) -> dict[str, Any]:
    """What the trace says of the memory: where it is, what was offered and why (its relevance:
    the score and what the question shares with it), how many memories of this input were
    passed over, what the answer cited and what was kept of it (nothing, for a run stopped or
    over an input that changed), and the sub-calls its cache answered."""
    return {
        "path": str(memory.store.path),
        "offered": [m.ref for m in memory.offered],
        "relevance": {
            ref: {"score": r.score, "shared": [*r.anchors, *r.words], "same_shape": r.same_shape}
            for ref, r in memory.relevance.items()
        },
        "passed_over": memory.passed_over,
        "cited": [f"M{i}" for i in memory.cited],
        "stored": [f"M{i}" for i in memory.stored],
        "cache_hits": engine.cache_hits if engine is not None else 0,
        "cache_saved_tokens": engine.cache_saved_tokens if engine is not None else 0,
    }
