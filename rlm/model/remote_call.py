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


def complete_remote(
    spec: ClientSpec, messages: list[dict[str, Any]], max_tokens: int | None
) -> dict[str, Any]:
    """Run one call as `spec` describes it; the reply, its usage and where it ran, as plain data.
    A failure is returned, not raised (its message and kind), so that the parent decides."""
    from rlm.errors import ConfigError, ProviderError
    from rlm.model.client import ModelClient
    from rlm.model.deployments import Deployment, ModelList, build_router

    router = None
    deployments: list[Deployment] = []
    if spec.deployments:
        deployments = [Deployment(i, g, dict(p)) for i, g, p in spec.deployments]
        router = build_router(ModelList(tuple(deployments)), spec.router_strategy, spec.request_timeout)
    client = ModelClient(
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
