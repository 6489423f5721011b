"""The reading order of several inputs: rotated sets oldest first, globs sorted naturally.

Imports nothing of rlm: the settings declare `--order` from ORDERS without loading the
input machinery.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ORDERS", "Part", "natural_key", "order_paths"]

ORDERS = ("auto", "name", "mtime", "given")
# `x.log.3`, `x.log.3.gz`: a rotated member's base name and rotation number, as logrotate
# names them (a dot before the number: `part-00001`, a split file, is not a rotation).
_ROTATED = re.compile(r"^(?P<base>.+?)\.(?P<n>\d{1,6})(?:\.(?:gz|gzip|bz2|xz|zst|zstd))?$", re.I)
_COMPRESSED_SUFFIX = re.compile(r"\.(?:gz|gzip|bz2|xz|zst|zstd)$", re.I)


@dataclass(frozen=True)
class Part:
    """One file of a several-file input, as given (`name`) and as found."""

    name: str
    path: str
    size: int
    mtime_ns: int
    key: str = ""
    compression: str | None = None
    # The file found when it was listed (its stat): every read that copies its bytes opens it
    # checked to be that file still (rlm.input.snapshot.open_same); 0 where not known.
    device: int = 0
    inode: int = 0


def natural_key(name: str) -> list[Any]:
    """Sort key putting `a2` before `a10`: runs of digits compare as numbers."""
    return [(0, int(tok), "") if tok.isdigit() else (1, 0, tok) for tok in re.split(r"(\d+)", name) if tok]


def order_paths(parts: list[Part], order: str) -> list[Part]:
    """The parts in reading order (see the module's docstring)."""
    if order == "given":
        return list(parts)
    if order == "name":
        return sorted(parts, key=lambda p: natural_key(p.name))
    if order == "mtime":
        return sorted(parts, key=lambda p: p.mtime_ns)  # stable: equal times keep the given order

    # auto: each rotated set oldest first (the highest number first, the unnumbered file last),
    # placed where its first member was given.
    def rotation(p: Part) -> tuple[str, int]:
        name = _COMPRESSED_SUFFIX.sub("", p.name)
        m = _ROTATED.match(p.name)
        return (m.group("base"), int(m.group("n"))) if m else (name, -1)

    bases = [rotation(p)[0] for p in parts]
    numbered = {b for p, b in zip(parts, bases, strict=True) if rotation(p)[1] >= 0}
    groups: dict[str, list[Part]] = {}
    sequence: list[str | Part] = []
    for p, base in zip(parts, bases, strict=True):
        if base in numbered:
            if base not in groups:
                groups[base] = []
                sequence.append(base)
            groups[base].append(p)
        else:
            sequence.append(p)
    out: list[Part] = []
    for item in sequence:
        if isinstance(item, Part):
            out.append(item)
        else:
            out.extend(sorted(groups[item], key=lambda p: -rotation(p)[1]))
    return out
