"""Deployments: several endpoints under one model name, served through litellm's Router.

The config file takes litellm's own `model_list` schema, as the LiteLLM proxy reads it:

    router_strategy = "least-busy"          # a setting (RLM_ROUTER_STRATEGY too)
    [[model_list]]
    model_name = "fast"
    litellm_params = { model = "openai/gpt-4o-mini", api_key = "os.environ/KEY_A", rpm = 500 }
    [[model_list]]
    model_name = "fast"
    litellm_params = { model = "openai/gpt-4o-mini", api_base = "http://gpu2:8000/v1", tpm = 90000 }

`-m fast` (or `--sub-model fast`) then sends each call to one deployment of the group, as the
strategy picks it; a deployment that fails (a 429, a 5xx, a timeout) cools down and the call goes
to another at once (rlm.model.client). Each deployment has an id (`model_info.id`, else
`GROUP#N`, its place in the group): the trace names the one that answered each call.

Fallbacks between groups, as litellm's Router takes them (`fallbacks = [{ fast = ["backup"] }]`):
a call to `fast` that has used its attempts (each deployment of `fast` failed, then the
retries) goes on to `backup`, with attempts of its own, within the same budget and deadline.

Keys are never written in a trace: `os.environ/NAME` is read from the environment when the run
starts (a name that is not set is one line, exit 4), and every value is masked where text is
written (rlm.trace.redact), as a key given any other way is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rlm.errors import ConfigError

# litellm's routing strategies (its Router's `routing_strategy`); simple-shuffle is its default
# and weighs deployments by their rpm/tpm where given.
STRATEGIES = (
    "simple-shuffle",
    "least-busy",
    "latency-based-routing",
    "usage-based-routing-v2",
    "cost-based-routing",
)
_ENV_PREFIX = "os.environ/"
# How long a deployment that failed without saying how long to wait is left out (seconds);
# one that sent Retry-After is left out that long (litellm's Router reads the header).
COOLDOWN_S = 5.0


@dataclass(frozen=True)
class Deployment:
    """One endpoint of a group, as the config file gave it."""

    id: str
    group: str
    params: dict[str, Any]  # litellm_params as given (a key as `os.environ/NAME` stays so)

    @property
    def model(self) -> str:
        return str(self.params["model"])

    @property
    def api_base(self) -> str | None:
        value = self.params.get("api_base")
        return str(value) if value else None

    def describe(self) -> dict[str, Any]:
        """What a trace records of it: no key (the caller takes its endpoint's URL's credentials out)."""
        out: dict[str, Any] = {"id": self.id, "group": self.group, "model": self.model}
        if self.api_base:
            out["api_base"] = self.api_base
        for limit in ("rpm", "tpm"):
            if self.params.get(limit) is not None:
                out[limit] = self.params[limit]
        return out


@dataclass(frozen=True)
class ModelList:
    deployments: tuple[Deployment, ...]
    # group -> the groups a call to it goes on to, in order, once it has used its attempts
    fallbacks: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def groups(self) -> set[str]:
        return {d.group for d in self.deployments}

    def of(self, group: str) -> list[Deployment]:
        return [d for d in self.deployments if d.group == group]

    def with_fallbacks(self, names: set[str]) -> set[str]:
        """The groups among `names` and those their calls may fall back to."""
        groups = names & self.groups()
        return groups | {f for g in groups for f in self.fallbacks.get(g, ())}


def parse_fallbacks(raw: Any, where: str, groups: set[str]) -> dict[str, tuple[str, ...]]:
    """The config file's `fallbacks` (litellm's shape: a list of one-key tables, a group and the
    groups it falls back to), checked against the groups the model list has. ConfigError (exit 4)."""
    if raw is None:
        return {}
    shape = f'{where}: fallbacks must be a list of tables, each a group and the groups it falls back to: fallbacks = [{{ fast = ["backup"] }}]'
    if not isinstance(raw, list):
        raise ConfigError(shape)
    out: dict[str, tuple[str, ...]] = {}
    for entry in raw:
        if not isinstance(entry, dict):
            raise ConfigError(shape)
        for group, targets in entry.items():
            if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets) or not targets:
                raise ConfigError(shape)
            for name in (group, *targets):
                if name not in groups:
                    raise ConfigError(f"{where}: fallbacks name {name!r}, which no [[model_list]] entry is")
            if group in targets:
                raise ConfigError(f"{where}: fallbacks: {group!r} cannot fall back to itself")
            out[group] = out.get(group, ()) + tuple(t for t in targets if t not in out.get(group, ()))
    return out


def parse_model_list(raw: Any, where: str, fallbacks: Any = None) -> ModelList | None:
    """The config file's `model_list` checked; None when there is none. ConfigError (exit 4)
    naming the entry and what it lacks, for a shape litellm would refuse later."""
    if raw is None:
        if fallbacks is not None:
            raise ConfigError(f"{where}: fallbacks name groups, and there is no [[model_list]]")
        return None
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: model_list must be a list of [[model_list]] tables")
    deployments: list[Deployment] = []
    seen: set[str] = set()
    for n, entry in enumerate(raw, 1):
        at = f"{where}: model_list entry {n}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at} must be a table")
        group = entry.get("model_name")
        params = entry.get("litellm_params")
        if not isinstance(group, str) or not group.strip() or "\x00" in group:
            raise ConfigError(f"{at} needs a model_name (the name -m picks)")
        if not isinstance(params, dict) or not isinstance(params.get("model"), str) or not params["model"]:
            raise ConfigError(
                f'{at} ({group}) needs litellm_params with a model, e.g. model = "openai/gpt-4o"'
            )
        for limit in ("rpm", "tpm"):
            value = params.get(limit)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{at} ({group}): {limit} must be a whole number of at least 1")
        info = entry.get("model_info") or {}
        if not isinstance(info, dict):
            raise ConfigError(f"{at} ({group}): model_info must be a table")
        place = sum(1 for d in deployments if d.group == group) + 1
        ident = str(info.get("id") or f"{group}#{place}")
        if ident in seen:
            raise ConfigError(f"{at} ({group}): the id {ident!r} is given twice")
        seen.add(ident)
        deployments.append(Deployment(ident, group, dict(params)))
    groups = {d.group for d in deployments}
    return ModelList(tuple(deployments), parse_fallbacks(fallbacks, where, groups))


def resolve_keys(models: ModelList, groups: set[str]) -> list[str]:
    """Check the keys of the groups a run uses before any call: an `os.environ/NAME` that is
    not set is one line naming the deployment (exit 4). Returns their values, for the caller to
    mask wherever text is written."""
    secrets: list[str] = []
    for d in models.deployments:
        if d.group not in groups:
            continue
        for name, value in d.params.items():
            if isinstance(value, str) and value.startswith(_ENV_PREFIX):
                variable = value[len(_ENV_PREFIX) :]
                found = os.environ.get(variable)
                if not found or not found.strip():
                    raise ConfigError(
                        f"deployment {d.id} ({d.model}): {name} names {variable}, which is not set"
                    )
                secrets.append(found)
            elif name in ("api_key", "aws_secret_access_key", "aws_session_token") and isinstance(value, str):
                secrets.append(value)
    return secrets


def build_router(models: ModelList, strategy: str, request_timeout: float) -> Any:
    """litellm's Router over every deployment. It makes one attempt per call (num_retries=0):
    rlm's own policy retries (rlm.model.client), against the run's deadline and budget; a failed
    deployment cools down at once (allowed_fails=0), so the next attempt goes to another."""
    from rlm.model.client import load_litellm

    litellm = load_litellm()
    model_list = [
        {"model_name": d.group, "litellm_params": dict(d.params), "model_info": {"id": d.id}}
        for d in models.deployments
    ]
    return litellm.Router(
        model_list=model_list,
        routing_strategy=strategy,
        num_retries=0,
        retry_after=0,
        allowed_fails=0,
        cooldown_time=COOLDOWN_S,
        timeout=request_timeout,
    )


def answered_by(resp: Any) -> str | None:
    """The id of the deployment that answered, as the Router marks its reply."""
    hidden = getattr(resp, "_hidden_params", None)
    if isinstance(hidden, dict) and hidden.get("model_id"):
        return str(hidden["model_id"])
    return None


def cooling_down_s(exc: BaseException) -> float | None:
    """Seconds until a deployment of the group is free again, when every one was cooling down
    (the Router then refuses the call without sending it)."""
    if type(exc).__name__ != "RouterRateLimitError":
        return None
    value = getattr(exc, "cooldown_time", None)
    return max(0.0, float(value)) if isinstance(value, int | float) else COOLDOWN_S
