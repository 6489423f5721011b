"""Settings: one place for flags > environment (RLM_*) > config file > defaults.

The config file is TOML (`$RLM_CONFIG`, else `~/.config/rlm/config.toml`),
with the same keys as the fields below, e.g. `model = "gpt-4o-mini"`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError, UsageError
from rlm.run.routing import SPECS

MAX_DEPTH_HARD = 3
PROTOCOLS = ("auto", "tools", "text")


@dataclass
class Settings:
    model: str | None = None
    sub_model: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    protocol: str = "auto"
    gguf: str | None = None
    # limits
    max_steps: int = 20
    max_depth: int = 3
    cell_timeout: float | None = None  # seconds per cell; None: scaled to the input (cell_seconds_for)
    max_calls: int = 200
    max_tokens: int = 2_000_000
    max_cost: float | None = None
    max_time: float | None = None
    concurrency: int = 8
    # sizes of what goes into prompts
    max_observation_chars: int = 4000
    history_tokens: int = 12_000
    sub_prompt_tokens: int = 6000
    reply_max_tokens: int = 2048
    # model-call behaviour
    request_timeout: float | None = None  # seconds per request; None: request_timeout_for
    retries: int = 4
    retry_base_delay: float = 1.0
    temperature: float = 0.0
    # sandbox
    memory_headroom_mb: int = 1024
    # outputs
    trace_dir: str | None = None  # None: the per-user data directory (trace_dir_for)
    trace: bool = True
    cache_dir: str | None = None
    # memory across runs (rlm.memory): the database, whether to use it, whether to reuse sub-calls
    memory: str | None = None  # None: rlm.memory.store.default_memory_path()
    no_memory: bool = False
    no_cache: bool = False
    no_reroute: bool = False  # no second, widened synthesis pass on a low-confidence answer

    def affecting_results(self) -> dict[str, Any]:
        """What a trace records: everything that can change the answer, no secrets."""
        d = asdict(self)
        for secret in ("api_key",):
            d.pop(secret, None)
        return d


_FIELD_TYPES = {f.name: f.type for f in fields(Settings)}


def _coerce(name: str, value: Any) -> Any:
    kind = str(_FIELD_TYPES[name])
    if value is None or value == "":
        return None if "None" in kind else value
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("bool"):
            if isinstance(value, bool):
                return value
            return str(value).strip().lower() in ("1", "true", "yes", "on")
    except (TypeError, ValueError):
        raise UsageError(f"setting {name!r} expects a number, got {value!r}") from None
    return str(value) if not isinstance(value, str) else value


def _config_file() -> Path:
    explicit = os.environ.get("RLM_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rlm" / "config.toml"


def _load_config_file() -> dict[str, Any]:
    path = _config_file()
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    unknown = sorted(set(data) - set(_FIELD_TYPES))
    if unknown:
        raise ConfigError(f"unknown key(s) in {path}: {', '.join(unknown)}")
    return data


def load_settings(flags: dict[str, Any] | None = None) -> Settings:
    """Resolve settings: explicit flags win, then RLM_* variables, then the config file."""
    merged: dict[str, Any] = {}
    merged.update(_load_config_file())
    for name in _FIELD_TYPES:
        env = os.environ.get("RLM_" + name.upper())
        if env is not None:
            merged[name] = env
    for name, value in (flags or {}).items():
        if value is not None:
            merged[name] = value
    settings = Settings(**{k: _coerce(k, v) for k, v in merged.items()})
    validate(settings)
    return settings


def validate(s: Settings) -> None:
    if s.protocol not in PROTOCOLS:
        raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, not {s.protocol!r}")
    if not 0 <= s.max_depth <= MAX_DEPTH_HARD:
        raise UsageError(f"--max-depth must be between 0 and {MAX_DEPTH_HARD}, not {s.max_depth}")
    for name in ("max_steps", "max_calls", "max_tokens", "concurrency", "max_observation_chars"):
        if getattr(s, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if s.request_timeout is not None and s.request_timeout <= 0:
        raise UsageError("RLM_REQUEST_TIMEOUT must be a positive number of seconds")
    if s.cell_timeout is not None and s.cell_timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")


@dataclass(frozen=True)
class Sizing:
    """Prompt-size settings scaled down to a model's context window (a 4k local model
    cannot take the defaults that suit a 128k hosted one)."""

    reply_tokens: int
    observation_chars: int
    sub_prompt_tokens: int


# A model request's time limit when none is set: a hosted model answers in seconds; the
# offline model on two cores reads a 3,000-token prompt and writes its reply in minutes.
REQUEST_SECONDS_HOSTED = 120.0
REQUEST_SECONDS_LOCAL = 600.0


def request_timeout_for(settings: Settings, *, local: bool) -> float:
    """The per-request time limit: the configured one, else one that suits where the model runs."""
    if settings.request_timeout is not None:
        return settings.request_timeout
    return REQUEST_SECONDS_LOCAL if local else REQUEST_SECONDS_HOSTED


# A cell's time limit when none is set: room for a full pass in Python over the input
# (about 30 s per GiB for a regex loop over log lines in the sandbox), never under 30 s.
CELL_SECONDS_MIN = 30.0
CELL_SECONDS_PER_GIB = 60.0


def cell_seconds_for(s: Settings, input_bytes: int) -> float:
    """The per-cell time limit: the setting, or one that scales with the input."""
    if s.cell_timeout is not None:
        return float(s.cell_timeout)
    return round(CELL_SECONDS_MIN + CELL_SECONDS_PER_GIB * input_bytes / (1 << 30), 1)


def default_trace_dir() -> Path:
    """Where runs are kept unless told otherwise: one place per user, so `rlm replay last`
    and `rlm logs` find them from any directory."""
    from platformdirs import user_data_path

    return user_data_path("rlm") / "traces"


def trace_dir_for(s: Settings) -> str:
    return s.trace_dir if s.trace_dir else str(default_trace_dir())


def trace_dirs_to_read(s: Settings) -> list[str]:
    """Where `rlm logs` and `rlm replay last` look: the directory asked for, or else the
    per-user one and, when it exists, ./traces (where runs went before, or when asked)."""
    if s.trace_dir:
        return [s.trace_dir]
    dirs = [str(default_trace_dir())]
    if Path("traces").is_dir():
        dirs.append("traces")
    return dirs


def sizing_for(s: Settings, window: int) -> Sizing:
    reply = min(s.reply_max_tokens, max(256, window // 6))
    return Sizing(
        reply_tokens=reply,
        observation_chars=min(s.max_observation_chars, max(800, window // 2)),
        # A sub-query's excerpt: its spec's budget (rlm.run.routing), bounded by the setting.
        sub_prompt_tokens=SPECS["subquery"].budget(window - reply - 700, s.sub_prompt_tokens),
    )
