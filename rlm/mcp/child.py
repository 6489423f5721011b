"""One run for the MCP server, in a process of its own: `python -m rlm _mcp-run` (which is
handed to a warm process when one runs, rlm.cli.warm_server), or `python -m rlm.mcp.child`.

The server writes one JSON request on this process's stdin (`path`, `question`, `settings`:
the server's flags with the client's lowered limits; `allowed` and `file_id`: the directories
open to the client and the file's device and inode when the server checked it) and reads JSON lines back: `{"progress":
"..."}` for each event of the run, then `{"result": {...}}` (rlm.api.Result.to_dict) or
`{"error": {...}}`. A run is synchronous and a thread cannot be stopped from outside while it
waits on a model or a sandbox cell; a process can, the way `rlm ask` is stopped: SIGINT ends
the run as Ctrl-C does, trace finished as `interrupted` (a second SIGINT quits at once).

The server checked the path, but this process opens it by name later: a directory on the path
swapped for a symlink in between would make it read another file. So the check is made again
here, and the input the run opened (its profile's identity, taken when it was opened) must be
the file the server checked, same device and inode, or the run is refused before anything of
it reaches a model (exit 3).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import IO, Any

from rlm.errors import ExitCode, Interrupted, RlmError


def describe(event: Any) -> str | None:
    """One line saying what the run just did, for the client's progress notification."""
    from rlm.run.actions import Action
    from rlm.run.events import FindingAdded, NodeStarted, Phase, RunWarning, Step, fields_of

    if isinstance(event, Phase):
        return event.what
    if isinstance(event, Step):
        action = event.action
        what = action.name if isinstance(action, Action) else "a reply it could not use"
        shown = next((ln for ln in event.outcome.observation.splitlines() if ln.strip()), "")
        return f"{event.node} step {event.step}: {what}" + (f" -> {shown[:160]}" if shown else "")
    if isinstance(event, FindingAdded):
        return f"finding {event.id}: {' '.join(event.text.split())[:160]}"
    if isinstance(event, RunWarning):
        return f"warning: {event.message}"
    if isinstance(event, NodeStarted):
        return f"{event.node} started: {event.question[:160]}"
    fields = ", ".join(f"{k}={v}" for k, v in fields_of(event).items())
    return f"{getattr(event, 'event', 'event')}: {fields}"[:240]


class _Lines:
    """The JSON lines to the server, one whole line at a time (events come from several threads)."""

    def __init__(self, out: IO[str]) -> None:
        import threading

        self.out = out
        self.lock = threading.Lock()

    def __call__(self, doc: dict[str, Any]) -> None:
        from rlm.trace.redact import redact

        line = json.dumps(redact(doc), default=str)
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()


_stops = [0]


def _on_stop(signum: int, frame: Any) -> None:
    _stops[0] += 1
    if _stops[0] > 1:
        os._exit(int(ExitCode.INTERRUPTED))
    raise Interrupted(ExitCode.INTERRUPTED)


def guard_input(real: str, allowed: list[str], expected: Any) -> None:
    """Refuse (exit 3) unless the file at `real` is still the one checked, now and when the
    run opens it: every input this process opens passes through rlm.input.source.Source."""
    from rlm.input import source as opened_inputs
    from rlm.mcp.paths import same_file

    try:
        st = os.stat(real)
        now: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        now = None
    same_file(real, allowed, expected, now)
    init = opened_inputs.Source.__init__

    def checked(self: Any, profile: Any, *, owned_paths: list[str] | None = None) -> None:
        init(self, profile, owned_paths=owned_paths)
        try:
            if profile.parts is not None:  # a view rlm built of it (a time range): the file it read
                for part in profile.parts:
                    same_file(real, allowed, expected, (part.get("device"), part.get("inode")))
            else:
                identity = profile.identity
                same_file(
                    real, allowed, expected, None if identity is None else (identity.device, identity.inode)
                )
        except BaseException:
            self.close()
            raise

    opened_inputs.Source.__init__ = checked  # type: ignore[method-assign]


def main() -> None:
    # The lines go to the server on a descriptor of their own; fd 1 then points at stderr, so
    # nothing a library prints can be taken for a line of the exchange.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    send = _Lines(out)
    signal.signal(signal.SIGINT, _on_stop)
    signal.signal(signal.SIGTERM, _on_stop)
    try:
        request = json.loads(sys.stdin.read())
        guard_input(request["path"], list(request["allowed"]), tuple(request["file_id"]))
        from rlm.api.ask import ask

        settings = dict(request["settings"])
        model, sub_model = settings.pop("model", None), settings.pop("sub_model", None)

        def progress(event: Any, /) -> None:
            line = describe(event)
            if line:
                send({"progress": line})

        result = ask(
            request["path"],
            request["question"],
            model=model,
            sub_model=sub_model,
            progress=progress,
            **settings,
        )
        send({"result": result.to_dict()})
    except KeyboardInterrupt as exc:
        code = getattr(exc, "exit_code", None) or Interrupted.last or int(ExitCode.INTERRUPTED)
        send({"error": {"message": "interrupted; the trace so far is kept", "exit_code": code}})
    except RlmError as exc:
        partial = getattr(exc, "result", None)
        send(
            {
                "error": {"message": exc.message, "exit_code": int(exc.exit_code), "trace": exc.trace_path},
                **({"result": partial.to_dict()} if partial is not None else {}),
            }
        )
    except Exception as exc:  # the last resort: one line for the client, never a traceback
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        send({"error": {"message": f"internal error ({what}); please report it", "exit_code": 1}})
    out.close()
    sys.stderr.flush()
    os._exit(0)  # litellm's teardown takes over a second and has nothing to keep


if __name__ == "__main__":
    main()
