"""Settings: one place for flags > environment (RLM_*) > config file > defaults.

Each setting is declared once, as a field of `Settings` (rlm.run.options says what a
declaration holds): the flags of `rlm ask` (rlm.cli.settings_flags), the variables, the
config-file keys and the README's options table (scripts/readme_tables.py) all come from it.
The config file is TOML (`$RLM_CONFIG`, else `~/.config/rlm/config.toml`),
with the same keys as the fields below, e.g. `model = "gpt-4o-mini"`.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError, UsageError
from rlm.input.order import ORDERS
from rlm.model.deployments import STRATEGIES, ModelList, parse_model_list
from rlm.run.options import Option, Rule, option, options_of
from rlm.trace.redact import register_secret, register_url_secrets, url_without_secrets

MAX_DEPTH_HARD = 3
# --executor's cluster: a Dask scheduler's host (a name, an IPv4 or a bracketed IPv6) and port.
DASK_ADDRESS = re.compile(r"^dask://(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})$")
PROTOCOLS = ("auto", "tools", "text", "typed")
MODES = ("rlm", "plain", "auto")
# A limit in seconds past a week is a typo, and past ~3e8 it overflows the timers it feeds.
_WEEK = 7 * 86_400.0

# A model request's time limit when none is set: a hosted model answers in seconds; the
# offline model on two cores reads a 3,000-token prompt and writes its reply in minutes.
REQUEST_SECONDS_HOSTED = 120.0
REQUEST_SECONDS_LOCAL = 600.0

# A cell's time limit when none is set: room for a full pass in Python over the input
# (about 30 s per GiB for a regex loop over log lines in the sandbox), never under 30 s.
CELL_SECONDS_MIN = 30.0
CELL_SECONDS_PER_GIB = 60.0


@dataclass
class Settings:
    """Every setting, declared once: type, default, flag, bounds and help (rlm.run.options).
    The config-file key is the field's name and the variable RLM_ + the name in capitals."""

    model: str | None = option(
        None, "litellm model string, or 'local'", flags=("-m", "--model"), unset="local if installed"
    )
    sub_model: str | None = option(
        None,
        "Model for sub-calls (llm_query, partition_map), e.g. a cheaper one",
        flags=("--sub-model",),
        unset="the model",
    )
    api_base: str | None = option(
        None,
        "OpenAI-compatible server URL (llama.cpp, vLLM, a stub)",
        flags=("--api-base",),
    )
    api_key: str | None = option(
        None, "API key (better: the provider's own variable, e.g. OPENAI_API_KEY)", flags=("--api-key",)
    )
    router_strategy: str = option(
        "simple-shuffle",
        "How a call picks one deployment of a model_list group (litellm's Router)",
        choices=STRATEGIES,
        doc="how a call picks one deployment of a `[[model_list]]` group (docs/scale.md): litellm's Router "
        "strategies `simple-shuffle` (weighed by each deployment's rpm/tpm), `least-busy`, "
        "`latency-based-routing`, `usage-based-routing-v2`, `cost-based-routing`",
    )
    protocol: str = option(
        "auto",
        "How the model acts: tools (native tool calls), text (one fenced block a turn) or auto",
        flags=("--protocol",),
        choices=PROTOCOLS,
        doc="`tools` (native tool calls), `text` (one fenced block per turn), `typed` (one JSON action a turn "
        "whose schema is built from the input's table, held to it by the server's grammar where it takes one; "
        "for small models), `auto` (`typed` for the offline model, `-m local`; tools where litellm says the "
        "model supports function calling; a custom `--api-base` is `text`)",
    )
    mode: str = option(
        "rlm",
        "How to answer: rlm (the investigation), plain (one direct call on what fits the window) or auto",
        flags=("--mode",),
        choices=MODES,
        doc="`rlm` (the investigation), `plain` (one direct model call on as much of the input as fits the "
        "window, the cut said), `auto` (plain when the whole input fits in half the window, else rlm)",
    )
    strict: bool = option(
        False,
        "Exit 1 with nothing on stdout when the answer is not grounded in what the run read, or its query left out a condition the question names",
        flags=("--strict",),
    )
    order: str = option(
        "auto",
        "Reading order of several inputs: auto, name, mtime or given",
        flags=("--order",),
        choices=ORDERS,
        doc="reading order of several inputs: `auto` (a rotated set oldest first, `x.log.14.gz` … `x.log.1`, "
        "`x.log`; other files as given, a glob's matches sorted naturally), `name` (natural sort), `mtime` "
        "(oldest first), `given` (as given)",
    )
    skip_bad: bool = option(
        False,
        "Of several inputs, leave out a missing, unreadable or damaged one (said on stderr and to the "
        "model) instead of stopping with exit 3",
        flags=("--skip-bad",),
    )
    include: str | None = option(
        None,
        "Of a directory given as input, read only the files these comma-separated globs name",
        flags=("--include",),
        unset="every file",
        doc="of a directory given as input, read only the files these comma-separated globs name "
        "(each matched against the file's path in the directory and its name: `'*.log,*.gz'`)",
    )
    exclude: str | None = option(
        None,
        "Of a directory given as input, leave out the files these comma-separated globs name",
        flags=("--exclude",),
        unset="none",
    )
    max_file_mb: float = option(
        1024.0,
        "Of a directory given as input, skip (and count) files larger than this many MB; 0: no limit",
        flags=("--max-file-mb",),
        low=0,
    )
    since: str | None = option(
        None,
        "Only the lines written at or after this time: 2026-11-25 14:02, 2h, 3d, today, yesterday",
        flags=("--since",),
        unset="no bound",
        doc="only the lines written at or after this time, by each line's own timestamp: a date and time "
        "(`2026-11-25 14:02`, `2026-11-25T14:02:05Z`; without a zone, on the log's own clock), a time "
        "before now (`90s`, `15m`, `2h`, `3d`, `1w`), `today` or `yesterday`; files wholly before it are "
        "not read (README, 'Time ranges')",
    )
    until: str | None = option(
        None,
        "Only the lines written at or before this time (as --since reads it)",
        flags=("--until",),
        unset="no bound",
    )
    gguf: str | None = option(
        None, "GGUF file for -m local", flags=("--gguf",), unset="the model `rlm local setup` installed"
    )
    executor: str = option(
        "local",
        "Where a fan-out's sub-calls and child investigations run: local, or dask://HOST:PORT (a Dask "
        "scheduler's workers)",
        flags=("--executor",),
        doc="where a fan-out's sub-calls and child investigations run: `local` (this process), or "
        "`dask://HOST:PORT`, the workers of a Dask scheduler, each call or child a task (docs/scale.md; "
        "`pip install 'rlm[cluster]'`)",
    )
    batch: bool = option(
        False,
        "Send a partition_map's sub-calls as one job of the provider's Batch API (about half the price; "
        "the run waits for it, up to 24 h)",
        flags=("--batch",),
        doc="send a `partition_map`'s sub-calls as one job of the provider's Batch API (OpenAI, or a LiteLLM "
        "proxy: `openai/…`, `litellm_proxy/…`): about half the price, for a run nobody waits on; the run polls "
        "the job (every 1 s at first, then less often, at most every 60 s) within `--max-time`, and an "
        "interrupted run's job is taken up again with `--resume RUN_ID` (docs/scale.md)",
    )
    # limits
    max_steps: int = option(20, "Turns per node", flags=("--max-steps",), low=1)
    max_depth: int = option(
        3, f"Recursion depth, at most {MAX_DEPTH_HARD}", flags=("--max-depth",), low=0, high=MAX_DEPTH_HARD
    )
    cell_timeout: float | None = option(
        None,
        "Seconds per sandbox cell",
        flags=("--timeout",),
        low=0,
        above=True,
        high=_WEEK,
        unset=f"{CELL_SECONDS_MIN:g}, plus {CELL_SECONDS_PER_GIB:g} per GiB of input",
    )
    max_calls: int = option(200, "Model calls for the whole run", flags=("--max-calls",), low=1)
    max_tokens: int = option(
        2_000_000, "Prompt and completion tokens for the whole run", flags=("--max-tokens",), low=1
    )
    max_cost: float | None = option(
        None, "Dollars for the whole run (where prices are known)", flags=("--max-cost",), low=0, unset="none"
    )
    max_time: float | None = option(
        None,
        "Wall-clock seconds for the whole run",
        flags=("--max-time",),
        low=0,
        above=True,
        high=_WEEK,
        unset="none",
    )
    concurrency: int = option(
        8, "Parallel sub-calls in partition_map", flags=("--concurrency",), low=1, high=256
    )
    # sizes of what goes into prompts
    max_observation_chars: int = option(
        4000, "Characters of an action's result shown to the model", low=1, high=1_000_000
    )
    history_tokens: int = option(12_000, "Tokens of earlier turns a node's prompt keeps", low=1)
    sub_prompt_tokens: int = option(6000, "Tokens of the excerpt one sub-call reads", low=1)
    reply_max_tokens: int = option(2048, "Tokens a model may write in one reply", low=1)
    # model-call behaviour
    request_timeout: float | None = option(
        None,
        "Seconds per model request",
        low=0,
        above=True,
        high=_WEEK,
        unset=f"{REQUEST_SECONDS_HOSTED:g}; {REQUEST_SECONDS_LOCAL:g} for -m local",
    )
    retries: int = option(4, "Retries of a failed model call", low=0, high=100)
    retry_base_delay: float = option(
        1.0, "Seconds before the first retry, doubled for each next one", low=0, high=3600
    )
    temperature: float = option(0.0, "Sampling temperature of every model call", low=0, high=2)
    # sandbox; 0 would mean no memory cap at all for model code: never a setting's doing.
    memory_headroom_mb: int = option(
        1024, "Megabytes model code may use beyond the input it reads", low=16, high=1 << 20
    )
    # outputs
    trace_dir: str | None = option(
        None,
        "Where traces go",
        flags=("--trace-dir",),
        unset="the per-user data directory, e.g. ~/.local/share/rlm/traces",
        doc="where the run's trace goes; `rlm logs` and `rlm replay last` look there (and only there), "
        "from any directory",
    )
    trace: bool = option(True, "Do not write a trace", flags=("--no-trace",))
    cache_dir: str | None = option(
        None, "Where the index and table of an input are kept", unset="the per-user cache directory"
    )
    # memory across runs (rlm.memory): the database, whether to use it, whether to reuse sub-calls
    memory: str | None = option(
        None, "The memory database", flags=("--memory",), unset="the per-user one (docs/memory.md)"
    )
    no_memory: bool = option(
        False, "Neither read nor add to the memory of earlier runs", flags=("--no-memory",)
    )
    no_cache: bool = option(
        False, "Ask every sub-call again, even one answered in an earlier run", flags=("--no-cache",)
    )
    no_reroute: bool = option(
        False,
        "No second, widened look when the answer is written with low confidence",
        flags=("--no-reroute",),
    )

    def affecting_results(self) -> dict[str, Any]:
        """What a trace records: everything that can change the answer, no secrets."""
        d = asdict(self)
        d.pop("api_key", None)
        # Credentials written into the endpoint's URL (user:pass@, ?api-key=) are not recorded.
        d["api_base"] = url_without_secrets(self.api_base)
        return d


OPTIONS: dict[str, Option] = options_of(Settings)
RULES: dict[str, Rule] = {name: o.rule for name, o in OPTIONS.items()}


def coerce(name: str, value: Any) -> Any:
    """`value` (from a flag, an RLM_* variable, the config file or a trace) as setting `name`
    holds it; ValueError naming what the setting expects when it is out of type or bounds."""
    return OPTIONS[name].coerce(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _config_file() -> Path:
    explicit = os.environ.get("RLM_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rlm" / "config.toml"


# Keys of the config file that are tables, not settings: no flag or variable holds them.
_TABLES = ("model_list", "fallbacks")


def _read_config_file() -> tuple[Path, dict[str, Any]]:
    path = _config_file()
    try:
        # Inside the try: a folder on the path the user cannot enter makes is_file() raise.
        if not path.is_file():
            return path, {}
        return path, tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None


def load_model_list() -> ModelList | None:
    """The deployments the config file lists (`[[model_list]]`, rlm.model.deployments), if any."""
    path, data = _read_config_file()
    return parse_model_list(data.get("model_list"), f"config file {path}", data.get("fallbacks"))


def _load_config_file() -> dict[str, Any]:
    path, data = _read_config_file()
    for table in _TABLES:
        data.pop(table, None)
    unknown = sorted(set(data) - set(OPTIONS))
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
    for name, declared in OPTIONS.items():
        env = os.environ.get(declared.env)
        if env is not None:
            try:
                merged[name] = declared.coerce(env)
            except ValueError as exc:
                raise UsageError(f"{declared.env} must be {exc}, not {_shown(env)}") from None
    for name, value in (flags or {}).items():
        if value is not None:
            try:
                merged[name] = coerce(name, value)
            except ValueError as exc:
                raise UsageError(f"{OPTIONS[name].flag} must be {exc}, not {_shown(value)}") from None
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
    if s.executor != "local" and not DASK_ADDRESS.match(s.executor):
        raise UsageError(f"--executor must be local or dask://HOST:PORT, not {s.executor!r}")
    if not 0 <= s.max_depth <= MAX_DEPTH_HARD:
        raise UsageError(f"--max-depth must be between 0 and {MAX_DEPTH_HARD}, not {s.max_depth}")


@dataclass(frozen=True)
class Sizing:
    """Prompt-size settings scaled down to a model's context window (a 4k local model
    cannot take the defaults that suit a 128k hosted one)."""

    reply_tokens: int
    observation_chars: int
    sub_prompt_tokens: int


def request_timeout_for(settings: Settings, *, local: bool) -> float:
    """The per-request time limit: the configured one, else one that suits where the model runs."""
    if settings.request_timeout is not None:
        return settings.request_timeout
    return REQUEST_SECONDS_LOCAL if local else REQUEST_SECONDS_HOSTED


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
    # Imported here: the CLI builds its flags from this module, and `rlm --version` or
    # `rlm logs` need none of the prompt machinery routing brings.
    from rlm.run.routing import SPECS

    reply = min(s.reply_max_tokens, max(256, window // 6))
    return Sizing(
        reply_tokens=reply,
        observation_chars=min(s.max_observation_chars, max(800, window // 2)),
        # A sub-query's excerpt: its spec's budget (rlm.run.routing), bounded by the setting.
        sub_prompt_tokens=SPECS["subquery"].budget(window - reply - 700, s.sub_prompt_tokens),
    )
