"""Settings: one place for flags > environment (RLM_*) > config file > defaults.

The config file is TOML (`$RLM_CONFIG`, else `~/.config/rlm/config.toml`),
with the same keys as the fields below, e.g. `model = "gpt-4o-mini"`.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError, UsageError
from rlm.run.routing import SPECS
from rlm.trace.redact import register_secret, register_url_secrets, url_without_secrets

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
        d.pop("api_key", None)
        # Credentials written into the endpoint's URL (user:pass@, ?api-key=) are not recorded.
        d["api_base"] = url_without_secrets(self.api_base)
        return d


_FIELD_TYPES = {f.name: f.type for f in fields(Settings)}

# A limit in seconds past a week is a typo, and past ~3e8 it overflows the timers it feeds.
_WEEK = 7 * 86_400.0


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: its type, and the bounds beyond which it makes no sense."""

    kind: type
    low: float | None = None
    above: bool = False  # the low bound itself is refused (a time limit of 0 s)
    high: float | None = None
    choices: tuple[str, ...] = ()

    def expects(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return "a text (a name, a path or a URL)"
        noun = "a whole number" if self.kind is int else "a number"
        bounds = []
        if self.low is not None:
            bounds.append(f"above {_num(self.low)}" if self.above else f"at least {_num(self.low)}")
        if self.high is not None:
            bounds.append(f"at most {_num(self.high)}")
        return f"{noun} ({', '.join(bounds)})" if bounds else noun


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


RULES: dict[str, Rule] = {
    "model": Rule(str),
    "sub_model": Rule(str),
    "api_base": Rule(str),
    "api_key": Rule(str),
    "protocol": Rule(str, choices=PROTOCOLS),
    "gguf": Rule(str),
    "max_steps": Rule(int, 1),
    "max_depth": Rule(int, 0, high=MAX_DEPTH_HARD),
    "cell_timeout": Rule(float, 0, above=True, high=_WEEK),
    "max_calls": Rule(int, 1),
    "max_tokens": Rule(int, 1),
    "max_cost": Rule(float, 0),
    "max_time": Rule(float, 0, above=True, high=_WEEK),
    "concurrency": Rule(int, 1, high=256),
    "max_observation_chars": Rule(int, 1, high=1_000_000),
    "history_tokens": Rule(int, 1),
    "sub_prompt_tokens": Rule(int, 1),
    "reply_max_tokens": Rule(int, 1),
    "request_timeout": Rule(float, 0, above=True, high=_WEEK),
    "retries": Rule(int, 0, high=100),
    "retry_base_delay": Rule(float, 0, high=3600),
    "temperature": Rule(float, 0, high=2),
    # 0 would mean no memory cap at all for model code: never a setting's doing.
    "memory_headroom_mb": Rule(int, 16, high=1 << 20),
    "trace_dir": Rule(str),
    "trace": Rule(bool),
    "cache_dir": Rule(str),
    "memory": Rule(str),
    "no_memory": Rule(bool),
    "no_cache": Rule(bool),
    "no_reroute": Rule(bool),
}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
# Flags whose name is not the setting's own.
_FLAG_NAMES = {"cell_timeout": "--timeout"}


def _number(rule: Rule, value: Any) -> int | float:
    """`value` as the rule's number type; ValueError when it is not one (bool, 2.5 for an int, nan)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError
    number = float(value.strip()) if isinstance(value, str) else float(value)
    if not math.isfinite(number):
        raise ValueError
    if rule.kind is int:
        if not number.is_integer():
            raise ValueError
        # Exact for digits (a float would round a 20-digit count), else the float's value (1e6).
        digits = isinstance(value, str) and value.strip().lstrip("+-").isdigit()
        return int(value) if digits else int(number)
    return number


def coerce(name: str, value: Any) -> Any:
    """`value` (from a flag, an RLM_* variable, the config file or a trace) as setting `name`
    holds it; ValueError naming what the setting expects when it is out of type or bounds."""
    rule = RULES[name]
    optional = "None" in str(_FIELD_TYPES[name])
    if value is None or (value == "" and optional):
        if optional:
            return None
        raise ValueError(rule.expects())
    try:
        if rule.kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower() if isinstance(value, str) else None
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ValueError
        if rule.kind is str:
            # A TOML table or list where a path goes, or a NUL no system call takes.
            if not isinstance(value, str) or "\x00" in value or value.strip() == "":
                raise ValueError
            if rule.choices and value not in rule.choices:
                raise ValueError
            return value
        number = _number(rule, value)
    except ValueError:
        raise ValueError(rule.expects()) from None
    too_low = rule.low is not None and (number <= rule.low if rule.above else number < rule.low)
    if too_low or (rule.high is not None and number > rule.high):
        raise ValueError(rule.expects())
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    unknown = sorted(set(data) - set(_FIELD_TYPES))
    if unknown:
        raise ConfigError(f"unknown key(s) in {path}: {', '.join(unknown)}")
    checked: dict[str, Any] = {}
    for name, value in data.items():
        try:
            checked[name] = coerce(name, value)
        except ValueError as exc:
            raise ConfigError(f"config file {path}: {name} must be {exc}, not {_shown(value)}") from None
    return checked


def load_settings(flags: dict[str, Any] | None = None) -> Settings:
    """Resolve settings: explicit flags win, then RLM_* variables, then the config file.
    Each value is checked where it comes from: a bad one is one line naming its source,
    exit 4 for the config file, exit 2 for a variable or a flag."""
    merged: dict[str, Any] = {}
    merged.update(_load_config_file())
    for name in _FIELD_TYPES:
        env = os.environ.get("RLM_" + name.upper())
        if env is not None:
            try:
                merged[name] = coerce(name, env)
            except ValueError as exc:
                raise UsageError(f"RLM_{name.upper()} must be {exc}, not {_shown(env)}") from None
    for name, value in (flags or {}).items():
        if value is not None:
            try:
                merged[name] = coerce(name, value)
            except ValueError as exc:
                flag = _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
                raise UsageError(f"{flag} must be {exc}, not {_shown(value)}") from None
    settings = Settings(**merged)
    validate(settings)
    # Keys given here (not in the environment, where redaction finds them) are masked too.
    register_secret(settings.api_key)
    register_url_secrets(settings.api_base)
    return settings


def validate(s: Settings) -> None:
    """Checks across settings (each value alone was checked by `coerce`)."""
    if s.protocol not in PROTOCOLS:
        raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, not {s.protocol!r}")
    if not 0 <= s.max_depth <= MAX_DEPTH_HARD:
        raise UsageError(f"--max-depth must be between 0 and {MAX_DEPTH_HARD}, not {s.max_depth}")


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
    """Where `rlm logs` and `rlm replay last` look: the directory asked for (--trace-dir,
    RLM_TRACE_DIR, the config), else the per-user one. Never ./traces unasked: a repository
    can ship a trace named to sort last, and `last` would then replay a stranger's record."""
    return [trace_dir_for(s)]


def sizing_for(s: Settings, window: int) -> Sizing:
    reply = min(s.reply_max_tokens, max(256, window // 6))
    return Sizing(
        reply_tokens=reply,
        observation_chars=min(s.max_observation_chars, max(800, window // 2)),
        # A sub-query's excerpt: its spec's budget (rlm.run.routing), bounded by the setting.
        sub_prompt_tokens=SPECS["subquery"].budget(window - reply - 700, s.sub_prompt_tokens),
    )
