"""Where a fan-out's sub-calls run: in this process (`--executor local`, the default: asyncio
tasks, rlm.run.subcalls) or as tasks of a Dask cluster (`--executor dask://HOST:PORT`).

On a cluster each sub-call is one task (rlm.model.remote_call.complete_remote) that a worker
runs with a model client of its own; at most `--concurrency` are out at once. Everything of
the run stays here: the budget is admitted before a task leaves and charged with what it used
when it comes back, the sub-call cache is asked first, the trace records each call with the
worker that made it (`ran_on`), a stop (Ctrl-C, SIGTERM, a budget) cancels what is still out.
The parent's CPU per call (litellm's request and reply handling, docs/scale.md) is what this
spreads. A child investigation (a chunk too big for one call) is one task too, the whole child
run on the worker with its own sandbox there (rlm.run.remote_child).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlm.errors import ConfigError, Interrupted, UsageError
from rlm.model.remote_call import ClientSpec, complete_remote
from rlm.run.settings import DASK_ADDRESS

if TYPE_CHECKING:
    from rlm.run.remote_child import ChildTask

LOCAL = "local"
# What a worker runs for a child investigation: its task in, its outcome out (plain data).
ChildRunner = Callable[["ChildTask"], dict[str, Any]]
# How often a wait on the cluster looks for a stop, and how long a scheduler may take to answer.
_POLL_S = 0.1
_CONNECT_S = 10.0


@dataclass
class Call:
    """One sub-call to send: its place in the fan-out, its messages, its estimated prompt."""

    index: int
    messages: list[dict[str, Any]]
    est_tokens: int


class DaskExecutor:
    """A connection to a Dask scheduler, made at the first fan-out and closed with the run."""

    def __init__(self, address: str, child_runner: ChildRunner | None = None) -> None:
        """`child_runner`: what a worker runs for a child investigation (the run's entry point
        hands it in: rlm.run.remote_child_run, which builds an engine of its own); None: the
        children run here."""
        self.child_runner = child_runner
        found = DASK_ADDRESS.match(address)
        if found is None:
            raise UsageError(f"--executor must be local or dask://HOST:PORT, not {address!r}")
        self.address = f"tcp://{found['host']}:{found['port']}"
        self._host, self._port = found["host"].strip("[]"), int(found["port"])
        self._client: Any = None

    def connect(self) -> Any:
        """The scheduler's client; ConfigError (exit 4) in one line when nothing answers there."""
        if self._client is None:
            try:
                from distributed import Client
            except ImportError:
                raise ConfigError(
                    "--executor dask:// needs Dask's distributed scheduler: pip install 'rlm[cluster]'"
                ) from None

            try:
                # Dask's client retries a refused connection until its timeout: a port nobody
                # listens on is told at once instead.
                socket.create_connection((self._host, self._port), timeout=_CONNECT_S).close()
                self._client = Client(  # type: ignore[no-untyped-call]
                    self.address, timeout=_CONNECT_S, set_as_default=False
                )
            except (OSError, TimeoutError) as exc:
                raise ConfigError(
                    f"no Dask scheduler answers at {self.address} ({' '.join(str(exc).split())[:160]}): "
                    "start one (dask scheduler; dask worker ADDRESS) or use --executor local"
                ) from None
        return self._client

    def run(
        self,
        spec: ClientSpec,
        calls: list[Call],
        *,
        max_tokens: int | None,
        concurrency: int,
        admit: Callable[[Call], bool],
        seconds_left: Callable[[], float | None],
        done: Callable[[Call, dict[str, Any]], None],
    ) -> None:
        """Send `calls`, at most `concurrency` out at once; `admit(call)` is asked first (False:
        answered without a call, e.g. from the cache) and charges the budget; `done(call, out)`
        receives each outcome as complete_remote returns it, in the order they come back."""
        # The cluster through the concurrent.futures interface: its futures are the standard ones.
        pool = self.connect().get_executor(pure=False)
        waiting = list(calls)
        out: dict[Future[dict[str, Any]], Call] = {}
        try:
            while waiting or out:
                while waiting and len(out) < concurrency:
                    call = waiting.pop(0)
                    if not admit(call):
                        continue
                    left = seconds_left()
                    timeout = (
                        spec.request_timeout if left is None else max(0.1, min(spec.request_timeout, left))
                    )
                    task_spec = ClientSpec(**{**spec.to_dict(), "request_timeout": timeout})
                    out[pool.submit(complete_remote, task_spec, call.messages, max_tokens)] = call
                if not out:
                    continue
                finished, _ = wait(out, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                if Interrupted.last is not None:
                    raise Interrupted.again()
                for future in finished:
                    call = out.pop(future)
                    done(call, _outcome(future))
        finally:
            for future in out:
                future.cancel()

    def investigate(self, task: ChildTask, stopped: Callable[[], bool]) -> dict[str, Any]:
        """Run a child investigation on the cluster (rlm.run.remote_child); its outcome. The
        task's data goes to a worker first (scattered: a slice is megabytes, more than a task's
        arguments should carry), and the child runs there. A stop here, or the run's budget
        spent (`stopped()`), sets the run's stop event, which the child reads before each
        model call; a stop here also stops waiting for it."""
        from distributed import Event

        assert self.child_runner is not None  # Children sends nothing without one
        client = self.connect()
        data = client.scatter(task, hash=False)
        future = client.submit(self.child_runner, data, pure=False)
        # Waited for by its done callback, its outcome read once: a Future.result(timeout) that
        # times out cancels the transfer Dask shares between the threads gathering at once,
        # and another child's wait then failed with Dask's own UnboundLocalError.
        finished = threading.Event()
        future.add_done_callback(lambda _f: finished.set())
        told = False
        try:
            while not finished.wait(_POLL_S):
                if Interrupted.last is not None or (stopped() and not told):
                    Event(task.stop_event, client=client).set()  # type: ignore[no-untyped-call]
                    told = True
                if Interrupted.last is not None:
                    raise Interrupted.again()
            return _outcome(future)
        finally:
            if not future.done():
                future.cancel()

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close(timeout=2)
            except Exception:  # noqa: BLE001 (a scheduler gone meanwhile: nothing left to close)
                pass


def _outcome(future: Any) -> dict[str, Any]:
    """What a finished task returned, or its failure as complete_remote reports one (a worker
    lost, a task that could not be unpickled there)."""
    try:
        result: dict[str, Any] = future.result()
    except Exception as exc:  # noqa: BLE001 (the cluster's failure is this call's, said in one line)
        return {"error": f"the cluster task failed: {' '.join(str(exc).split())[:200]}", "kind": "provider"}
    return result
