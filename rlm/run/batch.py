"""`--batch`: a partition_map's plain sub-calls as one job of the provider's Batch API.

About half the price of the same calls made one by one, for a fan-out nobody waits on: the
run sends one request file (rlm.model.batch_api), then looks at the job, at first after 1 s,
then half as long again each time up to once a minute, within --max-time; each look is a
`batch` progress event. The plain fan-out's rules hold: sub-calls the sub-call cache answers
are not sent; the budget admits every request before the job is made (its calls, tokens and,
where the price is known, its cost at the batch price) and is charged each reply's usage as
the results come back; each answer is recorded as a plain sub-call is (the trace's subcall,
the cassette, so `rlm replay --rerun` serves it), with the job's id; a request that failed is
that chunk's `[error] where: message`. A job that failed, expired or was cancelled is the
sub-model's provider failing (ProviderError, exit 5, naming the job).

A job outlives the run that made it. It is in the trace (`batches`) from the moment it is
made, and a run stopped while it waits (Ctrl-C, SIGTERM, --max-time) says how to take it up:
`rlm ask --batch --resume RUN_ID ...` with the same command. That run offers RUN_ID's jobs
(`resumable`, checked as the data they are); a fan-out whose request file is, byte for byte,
the one a job was made of (its sha256) looks at that job instead of sending another.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from rlm.errors import InputError, UsageError
from rlm.model.batch_api import TOKEN, BatchApi, BatchLine, BatchState, pause, sha256_of
from rlm.model.budget import BudgetExceeded, Reservation
from rlm.model.client import ModelClient, Reply
from rlm.run.events import BatchProgress, Phase, RunWarning
from rlm.run.host import chunk_error
from rlm.run.scope import Asker
from rlm.run.services import RunServices
from rlm.run.settings import Settings, trace_dir_for
from rlm.trace.reader import read_raw
from rlm.trace.redact import url_without_secrets
from rlm.trace.schema import BatchRecord, ResumeRecord, problems
from rlm.trace.writer import TraceWriter

# How long the run waits before each look at a job: 1 s (a small job at a fast server is done),
# then half as long again each time, up to a minute (a job of hours is asked ~60 times an hour).
FIRST_WAIT_S = 1.0
WAIT_GROWTH = 1.5
LONGEST_WAIT_S = 60.0
# Kept for the last look before --max-time's deadline: the look itself takes a moment.
_LAST_LOOK_S = 0.5
# What `--resume` takes: a run id as `rlm logs` lists them (2026-11-21T07-40-12-ab12), no path.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The trace's list of jobs is written from whichever thread's fan-out made one.
_jobs_lock = threading.Lock()

Item = tuple[str, list[dict[str, Any]], int]  # a chunk's (where, messages, estimated prompt tokens)


def resumable(settings: Settings, run_id: str) -> ResumeRecord:
    """The jobs of run `run_id` a run may take up (`--resume`), read from its trace in the trace
    directory: a trace is data, so each job's fields are checked (types, ids that are plain
    tokens) and one that fails is left out. UsageError (exit 2) when there is nothing to take up."""
    if not settings.batch:
        raise UsageError("--resume takes up the batch jobs of a --batch run: give --batch too")
    if not RUN_ID.match(run_id):
        raise UsageError(f"--resume takes a run id, as `rlm logs` lists them, not {run_id[:80]!r}")
    directory = trace_dir_for(settings)
    try:
        doc = read_raw(Path(directory) / f"{run_id}.json")
    except InputError as exc:
        raise UsageError(f"--resume {run_id}: {exc.message} (runs are looked up in {directory})") from None
    listed = doc.get("batches")
    jobs = [_checked(job) for job in listed] if isinstance(listed, list) else []
    kept = [job for job in jobs if job is not None]
    if not kept:
        raise UsageError(f"--resume {run_id}: that run sent no batch job to take up")
    return {"run_id": run_id, "batches": kept}


def _checked(job: Any) -> BatchRecord | None:
    """A job as another run's trace records it, if it has the shape of one; only what taking
    it up needs is kept."""
    if not isinstance(job, dict) or problems(job, BatchRecord):
        return None
    ids = (job.get("id"), job.get("input_file_id"))
    if not all(isinstance(i, str) and TOKEN.match(i) for i in ids):
        return None
    if not isinstance(job.get("sha256"), str) or not _SHA256.match(job["sha256"]):
        return None
    if (
        not isinstance(job.get("requests"), int)
        or job["requests"] < 1
        or not isinstance(job.get("where"), str)
    ):
        return None
    return {
        "id": job["id"],
        "input_file_id": job["input_file_id"],
        "sha256": job["sha256"],
        "requests": job["requests"],
        "where": job["where"],
        "model": str(job.get("model") or ""),
    }


def check_batch_api(sub: ModelClient) -> None:
    """At the start of a --batch run, before anything is sent: the sub-model's provider has a
    Batch API (ConfigError, exit 4, when it has none, or its endpoint answers that it has none)."""
    BatchApi(sub).probe(None)


class Keeper(Protocol):
    """What the fan-out keeps of its sub-calls (rlm.run.subcalls.Subcalls): the sub-call cache
    asked first, and each reply recorded, cached and paid for as a plain sub-call's."""

    def cached(self, where: str, messages: list[dict[str, Any]]) -> str | None: ...

    def settle(self, where: str, messages: list[dict[str, Any]], reply: Reply, batch_id: str) -> str: ...


def fan_out_as_batch(
    run: RunServices, keeper: Keeper, asker: Asker, items: list[Item], reservation: Reservation
) -> list[str]:
    """The answers of a partition_map's chunks, in order, its sub-calls made as one batch job."""
    api = BatchApi(run.sub_model)
    max_tokens = run.sub_sizing.reply_tokens
    results = [""] * len(items)
    asked: dict[str, int] = {}  # custom_id -> the chunk's place
    for i, (where, messages, _) in enumerate(items):
        hit = keeper.cached(where, messages)
        if hit is None:
            asked[f"chunk-{i + 1}"] = i
        else:
            results[i] = hit
    if not asked:
        return results
    _admit(run, api, [items[i] for i in asked.values()], reservation, max_tokens)
    try:
        lines = "".join(api.request_line(cid, items[i][1], max_tokens) + "\n" for cid, i in asked.items())
        job = _job(run, api, asker, lines.encode("utf-8"), len(asked))
        state, waited = _wait(run, api, asker, job)
        try:
            found = api.results(state, {cid: items[i][1] for cid, i in asked.items()}, run.budget.time_left)
        except BaseException:  # the job's results stay at the provider: a later run can read them
            _tell_how_to_resume(run, job)
            raise
    except BaseException:
        for _ in asked:  # admitted, never answered
            run.budget.abandon()
        raise
    for cid, i in asked.items():
        where, messages, _ = items[i]
        line = found.get(cid) or BatchLine(cid, error=f"the batch {job['id']} gave no result for it")
        if line.reply is None:
            run.budget.abandon()
            results[i] = chunk_error(where, str(line.error))
            continue
        line.reply.latency_s = waited  # a request of a job is answered when the job is
        results[i] = keeper.settle(where, messages, line.reply, job["id"])
    if state.status != "completed":
        # Its requests that were answered are paid and recorded above; the job itself is the
        # provider failing, as a call that failed after its retries is.
        said = f": {state.errors}" if state.errors else ""
        raise run.sub_model.give_up(
            f"the batch {job['id']} at {job.get('where')} ended {state.status}{said} "
            f"({state.completed:,} of {state.total:,} requests answered)"
        )
    return results


def _admit(
    run: RunServices, api: BatchApi, items: list[Item], reservation: Reservation, max_tokens: int
) -> None:
    """The whole job admitted before it is sent: every request's call and tokens, and the most
    it may cost at the batch price (a limit it would cross stops the run before it is sent)."""
    prompt = sum(est for _, _, est in items)
    run.budget.check_cost(api.cost_bound(prompt, max_tokens * len(items)))
    admitted = 0
    try:
        for _, _, est in items:
            run.budget.admit(est, reservation)
            admitted += 1
    except BudgetExceeded:
        for _ in range(admitted):
            run.budget.abandon()
        raise


def _job(run: RunServices, api: BatchApi, asker: Asker, data: bytes, count: int) -> BatchRecord:
    """The job of these requests: one an earlier run made of the same file (--resume), else a
    new one. Recorded in the trace, on disk, before the run waits for it."""
    sha = sha256_of(data)
    where = url_without_secrets(api.where) or api.where
    with _jobs_lock:
        taken = _offered(run.trace, sha, where)
        if taken is not None:  # claimed under the lock: two fan-outs never take up one job
            record: BatchRecord = {**taken, "node": asker.node_id, "step": asker.step, "status": "waiting"}
            _keep(run.trace, record)
    if taken is not None:
        run.progress(Phase(f"taking up batch {taken['id']} of run {taken['resumed_from']} ({asker.node_id})"))
        return record
    run.progress(Phase(f"sending a batch of {count:,} requests to {where} ({asker.node_id})"))
    file_id, state = api.submit(data, run.budget.time_left)
    record = {
        "id": state.id,
        "node": asker.node_id,
        "step": asker.step,
        "where": where,
        "model": run.sub_model.model,
        "input_file_id": file_id,
        "sha256": sha,
        "requests": count,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "status": state.status,
    }
    with _jobs_lock:
        _keep(run.trace, record)
    return record


def _offered(trace: TraceWriter, sha: str, where: str) -> BatchRecord | None:
    """A job `--resume` offered whose request file is this one, at this endpoint, not yet taken up."""
    offer = trace.doc.get("resume")
    if not isinstance(offer, dict):
        return None
    taken = {job.get("id") for job in trace.doc.get("batches") or []}
    for job in offer.get("batches") or []:
        if job.get("sha256") == sha and job.get("where") == where and job.get("id") not in taken:
            return {**job, "resumed_from": str(offer.get("run_id"))}
    return None


def _keep(trace: TraceWriter, record: BatchRecord) -> None:
    """The job's record, new or changed, in the trace (its log written at once). Lock held."""
    jobs = [dict(job) for job in trace.doc.get("batches") or []]
    at = next((n for n, job in enumerate(jobs) if job.get("id") == record["id"]), None)
    if at is None:
        jobs.append(dict(record))
    else:
        jobs[at] = dict(record)
    trace.update(batches=jobs)


def _wait(run: RunServices, api: BatchApi, asker: Asker, job: BatchRecord) -> tuple[BatchState, float]:
    """Look at the job until it ends: (its last state, the seconds waited). A stop, the time
    limit or a provider that stops answering ends the wait, and the run says how to take the
    job up again."""
    started = time.monotonic()
    wait_s = FIRST_WAIT_S
    state: BatchState | None = None
    try:
        while True:
            state = api.state(job["id"], run.budget.time_left())
            waited = round(time.monotonic() - started, 1)
            run.progress(
                BatchProgress(
                    asker.node_id, job["id"], state.status, state.completed, state.failed, state.total, waited
                )
            )
            if state.ended:
                return state, waited
            left = run.budget.time_left()
            if left is not None and left <= _LAST_LOOK_S:
                raise run.budget.out_of_time(
                    f"while the batch {job['id']} was {state.status.replace('_', ' ')}"
                )
            # The next look, or a last one just before the deadline (the job may be done by then).
            pause(wait_s if left is None else min(wait_s, left - _LAST_LOOK_S))
            wait_s = min(LONGEST_WAIT_S, wait_s * WAIT_GROWTH)
    except BaseException:
        _tell_how_to_resume(run, job)
        raise
    finally:
        done: BatchRecord = {**job, "waited_s": round(time.monotonic() - started, 1)}
        if state is not None:
            done.update({"status": state.status, "completed": state.completed, "failed": state.failed})
        with _jobs_lock:
            _keep(run.trace, done)


def _tell_how_to_resume(run: RunServices, job: BatchRecord) -> None:
    """A job the run stopped waiting for goes on at the provider (and is paid): say how its
    answers can still be used."""
    where = job.get("where")
    if run.trace.path is None:
        message = (
            f"the batch {job['id']} is still at {where}; this run keeps no trace (--no-trace), so it "
            "cannot be taken up again"
        )
    else:
        message = (
            f"the batch {job['id']} ({job.get('requests', 0):,} requests) is still at {where}: to use its "
            f"answers instead of sending them again, run the same command with --batch --resume {run.trace.run_id}"
        )
    run.trace.warn(message)
    run.progress(RunWarning(message))
