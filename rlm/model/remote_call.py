"""One model call made on another machine: the task a Dask worker runs for a fan-out's sub-call.

The parent sends what the call needs and nothing of the run (rlm.run.executor): the model
as the run resolved it (`ClientSpec`), the messages and the reply cap. The worker builds its
own client from the spec, with its own credentials: a key given with --api-key travels with
the spec (the user chose to hand it to rlm); otherwise the worker's environment has to hold
the provider's variable, as a deployment's `os.environ/NAME` is read where the call is made.
It returns the reply, its usage and where it ran; the parent charges the run's one budget,
records the call and keeps the trace. Retries follow the client's own policy on the worker,
within the time the parent said was left.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from rlm.model.client import ModelClient, Reply


@dataclass(frozen=True)
class ClientSpec:
    """A model client as a worker rebuilds it: plain data, picklable."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    request_timeout: float = 120.0
    retries: int = 4
    retry_base_delay: float = 1.0
    temperature: float = 0.0
    context_window: int | None = None
    router_strategy: str = "simple-shuffle"
    # A model_list group's deployments: (id, group, litellm_params), keys left as os.environ/NAME.
    deployments: tuple[tuple[str, str, dict[str, Any]], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, client: ModelClient, router_strategy: str) -> ClientSpec:
        """What a worker needs to make the calls `client` makes (`client_of` rebuilds it)."""
        return cls(
            model=client.model,
            api_base=client.api_base,
            api_key=client.api_key,
            request_timeout=client.request_timeout,
            retries=client.retries,
            retry_base_delay=client.retry_base_delay,
            temperature=client.temperature,
            context_window=client.context_window(),
            router_strategy=router_strategy,
            deployments=tuple((d.id, d.group, dict(d.params)) for d in client.deployments),
        )


def client_of(spec: ClientSpec) -> ModelClient:
    """The model client `spec` describes, built on the worker that makes the call."""
    from rlm.model.deployments import Deployment, ModelList, build_router

    router = None
    deployments = [Deployment(i, g, dict(p)) for i, g, p in spec.deployments]
    if deployments:
        router = build_router(ModelList(tuple(deployments)), spec.router_strategy, spec.request_timeout)
    return ModelClient(
        spec.model,
        api_base=spec.api_base,
        api_key=spec.api_key,
        request_timeout=spec.request_timeout,
        retries=spec.retries,
        retry_base_delay=spec.retry_base_delay,
        temperature=spec.temperature,
        context_window=spec.context_window,
        router=router,
        deployments=deployments,
    )


def reply_of(out: dict[str, Any], model: str) -> Reply:
    """The reply `complete_remote` sent back, as the parent's client would have returned it."""
    reply = Reply.from_dict(out["reply"])
    reply.prompt_tokens = int(out["prompt_tokens"])
    reply.completion_tokens = int(out["completion_tokens"])
    reply.cost = out.get("cost")
    reply.latency_s = float(out.get("latency_s") or 0.0)
    reply.model = model
    reply.deployment = out.get("deployment")
    return reply


def complete_remote(
    spec: ClientSpec, messages: list[dict[str, Any]], max_tokens: int | None
) -> dict[str, Any]:
    """Run one call as `spec` describes it; the reply, its usage and where it ran, as plain data.
    A failure is returned, not raised (its message and kind), so that the parent decides."""
    from rlm.errors import ConfigError, ProviderError

    client = client_of(spec)
    where = f"{socket.gethostname()}:{os.getpid()}"
    try:
        reply = client.complete(messages, max_tokens=max_tokens)
    except ConfigError as exc:
        return {"error": exc.message, "kind": "config", "ran_on": where}
    except ProviderError as exc:
        return {"error": exc.message, "kind": "provider", "ran_on": where}
    return {
        "reply": reply.to_dict(),
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "cost": reply.cost,
        "latency_s": reply.latency_s,
        "deployment": reply.deployment,
        "ran_on": where,
    }
