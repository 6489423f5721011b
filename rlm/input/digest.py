"""The input's sha256, computed once, by whichever needs it first.

A big file's hash runs after its table's build (hashing beside the build's threads took a core
from it: rlm.input.source), and nothing else needs it before the model's first turn, except a
memory kept of a file of the same size and first bytes: the run then waits for the hash to know
whether the memory is of this file. That wait must not also wait for the build (1 GB syslog,
2 cores: the first request 17 s after the start instead of 2.8 s). A wait on a digest not yet
started starts it in a thread of its own; the thread after the build then finds it under way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future


class Digest(Future[str]):
    """A future of the input's sha256 whose computation runs at most once: `compute_once()` in
    the thread that calls it, or in a thread of its own at the first `result()` that finds it
    not started. Whatever the computation meets ends the future (a value or an exception)."""

    def __init__(self, compute: Callable[[], str] | None = None) -> None:
        super().__init__()
        self._compute = compute
        self._claimed = threading.Lock()
        self._started = compute is None

    @classmethod
    def known(cls, value: str) -> Digest:
        digest = cls()
        digest.set_result(value)
        return digest

    def compute_once(self) -> None:
        """Compute the digest here, unless it is done or under way elsewhere."""
        with self._claimed:
            if self._started:
                return
            self._started = True
        assert self._compute is not None
        try:
            value = self._compute()
        except BaseException as exc:  # noqa: BLE001 (handed to whoever waits: never a hang)
            self.set_exception(exc)
            return
        self.set_result(value)

    def start(self) -> None:
        """Start the computation in a thread of its own, unless it is done or under way."""
        if not self._started:
            threading.Thread(target=self.compute_once, name="rlm-sha256", daemon=True).start()

    def result(self, timeout: float | None = None) -> str:
        self.start()
        return super().result(timeout)
