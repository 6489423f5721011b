"""A real local model with zero configuration: a GGUF served by llama.cpp on 127.0.0.1.

Cheap to import on purpose (standard library only): the engine asks
`installed_gguf()` on every run to decide whether the local model is the
default, and `llama_cpp` itself is only ever imported by the server child.

    gguf = installed_gguf(settings.gguf)          # None: not set up
    with local_server(gguf, n_ctx=4096) as ep:    # starts and stops the server
        litellm.completion(model=ep.model, api_base=ep.api_base, api_key=ep.api_key, ...)
"""

from __future__ import annotations

from pathlib import Path

from rlm.errors import ConfigError
from rlm.local.models import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    SMALL_MODEL,
    ModelSpec,
    is_assembled,
    model_path,
    models_dir,
)
from rlm.local.server import LOCAL_MODEL_ALIAS, SERVER_REQUIREMENT, LocalEndpoint, local_server

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "LOCAL_MODEL_ALIAS",
    "SERVER_REQUIREMENT",
    "SMALL_MODEL",
    "LocalEndpoint",
    "ModelSpec",
    "installed_gguf",
    "local_server",
    "models_dir",
]

_GGUF_MAGIC = b"GGUF"


def validate_gguf(path: Path) -> Path:
    """`path` resolved, if it is a readable GGUF file; ConfigError saying what is wrong otherwise."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"GGUF model file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"GGUF model path is not a file: {path}")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(len(_GGUF_MAGIC))
    except OSError as exc:
        raise ConfigError(f"cannot read GGUF model file {path}: {exc.strerror or exc}") from exc
    if magic != _GGUF_MAGIC:
        raise ConfigError(f"{path} is not a GGUF model file (it does not start with 'GGUF')")
    return path.resolve()


def installed_gguf(explicit: str | Path | None = None) -> Path | None:
    """The GGUF the local model should serve, or None when none is installed.

    An explicit path (from `--gguf` or configuration) is validated and wins;
    otherwise the first assembled model of KNOWN_MODELS (the 1.5B model,
    then the small 0.5B one) in `models_dir()`.
    """
    if explicit is not None and str(explicit) != "":
        return validate_gguf(Path(explicit))
    for spec in KNOWN_MODELS:
        if is_assembled(spec):
            return model_path(spec)
    return None
