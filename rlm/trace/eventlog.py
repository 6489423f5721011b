"""The live trace: one JSON event per line, appended as the run goes, folded into the document.

Rewriting the whole document after every event costs the size of everything recorded so far,
each time: quadratic in the steps of a run. While a run goes, its trace is instead this log,
`<run_id>.jsonl` beside the document's name: each event is one line appended with one write
(no fsync: a killed process loses nothing it wrote, only a power loss can). The first line
holds the document a run starts with; every later line changes it:

    {"e": "start", "doc": {...}}                         the document with every list empty
    {"e": "set", "fields": {...}}                        top-level fields replaced
    {"e": "extend", "field": F, "keep": K, "items": [...]}  F becomes its first K items + items
    {"e": "append", "to": F, "item": ...}                one item added to the list F
    {"e": "node", "id": ID, "fields": {...}}             fields of node ID replaced
    {"e": "client", "role": R, "client": {...}}          a model client of the cassette
    {"e": "call", "call": {...}}                         one model call added to the cassette

`fold` applies them in order. At the run's end the writer writes the folded document as
`<run_id>.json` and removes the log; a log left behind (kill -9, power loss) is folded by
the reader. Events of a kind this version does not know are skipped (a later version may
add kinds), and so is a line that is not whole JSON (the last one, cut by a power loss).

The log is its user's alone, like every trace: a new 0600 file made with O_EXCL and
O_NOFOLLOW, so neither a symlink nor a file planted at its name is ever written through.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

from rlm.privatefiles import FILE_MODE

LOG_SUFFIX = ".jsonl"
# The top-level lists an "append" may add to.
LISTS = ("warnings", "nodes", "steps", "subcalls", "bridge_calls", "provider_events")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def log_path(document: str | os.PathLike[str]) -> Path:
    """The live log of the document at `document` (`<run_id>.json` -> `<run_id>.jsonl`)."""
    return Path(document).with_suffix(LOG_SUFFIX)


def document_path(log: str | os.PathLike[str]) -> Path:
    """The document a live log folds into (`<run_id>.jsonl` -> `<run_id>.json`)."""
    return Path(log).with_suffix(".json")


def create_log(path: str | os.PathLike[str], first: bytes) -> int:
    """A new 0600 log holding `first` (its "start" line), opened for appending; raises OSError
    (FileExistsError when anything, a symlink included, is already at `path`).

    The log appears at `path` with its first line whole: it is written to a private file
    beside it, then linked to `path` (link(2) never replaces a name), so a reader that finds
    the log, a `replay` of a run just starting included, never sees it empty or half-written.
    Where the file system has no hard links, the log is made at `path` and written there."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.new")
    fd = _create(temp)
    try:
        append(fd, first)
        linked = _linked(temp, target)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):
        os.unlink(temp)
    if linked:
        return fd
    os.close(fd)  # no hard links here: the log is made in place
    fd = _create(target)
    try:
        append(fd, first)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _linked(source: Path, target: Path) -> bool:
    """Link `source` to `target`: False where the file system has no hard links (EPERM, ENOTSUP
    on some mounts); FileExistsError when the name is taken (the caller picks another)."""
    try:
        os.link(source, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        return False
    return True


def _create(path: Path) -> int:
    """A new, empty 0600 file opened for appending; FileExistsError when anything is at `path`."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a umask cannot widen it, but be exact as every private file is
    except OSError:
        os.close(fd)
        raise
    return fd


def dump_line(event: Any) -> str:
    """One event as its line (without the newline)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def append(fd: int, data: bytes) -> None:
    """Append whole lines with as few writes as the kernel allows (a short write is resumed)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def common_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading items two lists share: what an "extend" keeps of the old one."""
    n = min(len(old), len(new))
    for i in range(n):
        if old[i] != new[i]:
            return i
    return n


def _apply(doc: dict[str, Any], event: dict[str, Any]) -> bool:
    """Apply one event to the document; False when it is not one this version can apply."""
    kind = event.get("e")
    if kind == "set" and isinstance(event.get("fields"), dict):
        doc.update(event["fields"])
    elif kind == "extend" and isinstance(event.get("field"), str) and isinstance(event.get("items"), list):
        keep, current = event.get("keep"), doc.get(event["field"])
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            return False
        kept = current[:keep] if isinstance(current, list) else []
        doc[event["field"]] = kept + event["items"]
    elif kind == "append" and event.get("to") in LISTS and "item" in event:
        target = doc.get(event["to"])
        if not isinstance(target, list):
            target = doc[event["to"]] = []
        target.append(event["item"])
    elif kind == "node" and isinstance(event.get("fields"), dict):
        for node in doc.get("nodes") or []:
            if isinstance(node, dict) and node.get("id") == event.get("id"):
                node.update(event["fields"])
    elif kind in ("client", "call"):
        cassette = doc.get("cassette")
        if not isinstance(cassette, dict):
            cassette = doc["cassette"] = {}
        if kind == "client" and isinstance(event.get("role"), str) and isinstance(event.get("client"), dict):
            clients = cassette.get("clients")
            if not isinstance(clients, dict):
                clients = cassette["clients"] = {}
            clients[event["role"]] = event["client"]
        elif kind == "call" and isinstance(event.get("call"), dict):
            calls = cassette.get("calls")
            if not isinstance(calls, list):
                calls = cassette["calls"] = []
            calls.append(event["call"])
        else:
            return False
    else:
        return False
    return True


def fold(text: str) -> tuple[dict[str, Any] | None, int]:
    """(the document the log's events build, how many lines were skipped); the document is
    None when the first line is not a "start" event holding one."""
    lines = text.splitlines()
    doc: dict[str, Any] | None = None
    skipped = 0
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if doc is None:
            if number == 0 and isinstance(event, dict) and event.get("e") == "start":
                start = event.get("doc")
                if isinstance(start, dict):
                    doc = start
                    continue
            return None, skipped
        if not isinstance(event, dict) or not _apply(doc, event):
            skipped += 1
    return doc, skipped
