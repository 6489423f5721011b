"""The workers of a run: the one factory of worker specs, and the short profile a child node reads.

`worker_spec_for` is used by the run, `rlm replay --verify` and the tests, so
each starts the worker users get.
"""

from __future__ import annotations

from rlm.input.source import Profile
from rlm.run.settings import Settings
from rlm.sandbox.client import WorkerSpec
from rlm.text.textcap import cap_line, cap_middle
from rlm.text.textfile import MappedText


def worker_spec_for(
    profile: Profile, settings: Settings, start_line: int | None = None, end_line: int | None = None
) -> WorkerSpec:
    """The worker of a run over the input, or lines of it: the one factory the run,
    `rlm replay --verify` and the tests use, so each checks the worker users get."""
    return WorkerSpec(
        path=profile.work_path,
        encoding=profile.work_encoding,
        start_line=start_line,
        end_line=end_line,
        index_path=profile.index_path,
        index_pending=profile.index_job is not None,  # sent to the worker once made (Sandbox.settle)
        # On top of what the worker already maps (the input, its index, the interpreter):
        # the kernel layer measures that itself, so only the headroom is ours to give.
        # drop_to_uid stays None: the kernel layer drops root to nobody by itself.
        memory_bytes=settings.memory_headroom_mb * 1024 * 1024,
        # The parsed table of the input (rlm.input.tables), opened by the worker before lock-down.
        table_path=profile.table_path,
        table_error=profile.table_error,
        table_pending=profile.table_job is not None,  # the worker asks for it at its first sql()
        # [name, first line, last line] of each part, and under a time range the runs of the
        # part's own line numbers its lines are (rlm.sandbox.worker.files.part_locator).
        parts=[
            [p["name"], p["first_line"], p["last_line"], *([p["runs"]] if "runs" in p else [])]
            for p in profile.parts
        ]
        if profile.parts
        else None,
    )


def text_worker_spec(path: str, settings: Settings) -> WorkerSpec:
    """The worker of a child over a text the parent investigation built (UTF-8, no index yet)."""
    return WorkerSpec(path=path, encoding="utf-8", memory_bytes=settings.memory_headroom_mb * 1024 * 1024)


def slice_profile(window: MappedText, what: str, sample_lines: int = 3) -> str:
    """A short profile of a slice for a child node's prompt, bounded in size."""
    n = window.n_lines
    head = [cap_line(t, 200) for _, t in window.peek_lines(1, sample_lines)]
    tail = (
        [cap_line(t, 200) for _, t in window.peek_lines(max(1, n - sample_lines + 1), sample_lines)]
        if n > sample_lines
        else []
    )
    parts = [f"{what}: {n:,} lines, {window.window_bytes:,} bytes", "first lines:", *head]
    if tail:
        parts += ["last lines:", *tail]
    return cap_middle("\n".join(parts), 1500)
