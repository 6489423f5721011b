"""A scripted model provider, registered in litellm as `scripted/<script.json>`.

It plays replies from a JSON script so the real loop (litellm included) runs
with no network: tests, demos and benchmarks use it, and `rlm replay --rerun`
plays through it the replies of a trace written before traces kept a cassette
(a trace with one is served by rlm.run.cassette, at the model client). A script is a list of
replies, or an object:

    {"replies": [...],                      # played in order
     "rules": [{"match": "regex", "reply": ..., "times": 3}],   # tried first
     "default": reply,                      # when the replies run out
     "log": "calls.jsonl"}                  # every request appended here

A rule's regex is searched in the request's messages ("role: content" lines);
its reply text, and its tool call's text arguments, may use the groups it matched
(\\1, \\g<name>).
A reply is a string (the message content), or an object with any of
`content`, `tool` + `args` (one tool call), `tool_calls` ([{name, args}]),
`delay` (seconds to wait first), `error` (`rate_limit`, `server`, `timeout`,
`auth`, `bad_request`) and `error_times` (fail that many times, then reply).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

PROVIDER = "scripted"


class _Script:
    def __init__(self, path: Path) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, list):
            data = {"replies": data}
        self.replies: list[Any] = list(data.get("replies", []))
        self.rules: list[dict[str, Any]] = [dict(r) for r in data.get("rules", [])]
        self.default = data.get("default")
        log = data.get("log") or os.environ.get("RLM_SCRIPT_LOG")
        self.log = (path.parent / log) if log and not os.path.isabs(log) else (Path(log) if log else None)
        self.position = 0
        self.failures: dict[int, int] = {}
        self.lock = threading.Lock()

    def next_reply(self, transcript: str) -> tuple[Any, int]:
        with self.lock:
            for i, rule in enumerate(self.rules):
                found = re.search(rule["match"], transcript, re.S)
                if found:
                    times = rule.get("times")
                    if times is not None:
                        if times <= 0:
                            continue
                        rule["times"] = times - 1
                    return _expand(rule["reply"], found), -1 - i
            if self.position < len(self.replies):
                self.position += 1
                return self.replies[self.position - 1], self.position - 1
            if self.default is not None:
                return self.default, -1000
            return {
                "error": "bad_request",
                "message": f"script exhausted after {len(self.replies)} replies",
            }, -2000

    def should_fail(self, key: int, reply: dict[str, Any]) -> bool:
        """Errors with error_times fail that many times for the same reply, then succeed."""
        times = reply.get("error_times")
        if times is None:
            return True
        with self.lock:
            seen = self.failures.get(key, 0)
            if seen < times:
                self.failures[key] = seen + 1
                return True
            return False

    def replay(self, key: int) -> None:
        with self.lock:
            if self.position == key + 1:
                self.position = key

    def record(self, messages: list[dict[str, Any]], tools: Any) -> None:
        if not self.log:
            return
        entry = {
            "t": time.time(),
            "messages": messages,
            "tools": [t["function"]["name"] for t in tools or []],
        }
        with self.lock, open(self.log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def _expand(reply: Any, found: re.Match[str]) -> Any:
    """Fill \\1, \\g<name> in a rule's reply text, and in the texts of its tool call's
    arguments, from what its regex matched."""
    if isinstance(reply, str):
        return found.expand(reply)
    if isinstance(reply, dict):
        out = dict(reply)
        if isinstance(out.get("content"), str):
            out["content"] = found.expand(out["content"])
        if isinstance(out.get("args"), dict):
            out["args"] = {k: _fill(v, found) if isinstance(v, str) else v for k, v in out["args"].items()}
        return out
    return reply


_GROUP_REF = re.compile(r"\\(?:(\d+)|g<(\w+)>)")


def _fill(text: str, found: re.Match[str]) -> str:
    """`text` with \\1, \\g<name> filled in; every other backslash kept (an argument may be a
    regex or code of its own)."""

    def group(ref: re.Match[str]) -> str:
        key = int(ref[1]) if ref[1] else ref[2]
        try:
            return found.group(key) or ""
        except IndexError:
            return ref[0]

    return _GROUP_REF.sub(group, text)


_scripts: dict[str, _Script] = {}
_scripts_lock = threading.Lock()


def _script_for(model: str) -> _Script:
    name = model.split("/", 1)[1] if model.startswith(PROVIDER + "/") else model
    path = Path(name).expanduser().resolve()
    with _scripts_lock:
        if str(path) not in _scripts:
            _scripts[str(path)] = _Script(path)
        return _scripts[str(path)]


def _transcript(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        lines.append(f"{m.get('role')}: {content or ''}")
    return "\n".join(lines)


def register_scripted_provider(litellm: Any) -> None:
    """Add the scripted provider to litellm's custom provider map (idempotent)."""
    from litellm.llms.custom_llm import CustomLLM, CustomLLMError
    from litellm.types.utils import (
        ChatCompletionMessageToolCall,
        Choices,
        Function,
        Message,
        ModelResponse,
        Usage,
    )

    if any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        return

    status_of = {"rate_limit": 429, "server": 503, "timeout": 408, "auth": 401, "bad_request": 400}

    def build(model: str, reply: Any, messages: list[dict[str, Any]]) -> ModelResponse:
        from rlm.model.tokens import count_messages, count_text

        if isinstance(reply, str):
            reply = {"content": reply}
        calls = []
        specs = list(reply.get("tool_calls") or [])
        if "tool" in reply:
            specs.insert(0, {"name": reply["tool"], "args": reply.get("args", {})})
        for spec in specs:
            args = spec.get("args", {})
            arguments = args if isinstance(args, str) else json.dumps(args)
            calls.append(
                ChatCompletionMessageToolCall(
                    id="call_" + uuid.uuid4().hex[:12],
                    type="function",
                    function=Function(name=spec["name"], arguments=arguments),
                )
            )
        content = reply.get("content")
        message = Message(content=content, role="assistant", tool_calls=calls or None)
        prompt_tokens = count_messages(messages)
        completion_tokens = count_text(content or "") + sum(count_text(c.function.arguments) for c in calls)
        return ModelResponse(
            model=model,
            choices=[Choices(index=0, message=message, finish_reason="tool_calls" if calls else "stop")],
            usage=Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
        )

    def pick(
        model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any]
    ) -> tuple[Any, float]:
        script = _script_for(model)
        script.record(messages, optional_params.get("tools"))
        reply, key = script.next_reply(_transcript(messages))
        delay = float(reply.get("delay", 0)) if isinstance(reply, dict) else 0.0
        if isinstance(reply, dict) and reply.get("error") and script.should_fail(key, reply):
            kind = reply["error"]
            if reply.get("error_times") is not None and key >= 0:
                script.replay(key)  # the retry must meet the same reply
            raise CustomLLMError(status_code=status_of.get(kind, 500), message=reply.get("message", kind))  # type: ignore[no-untyped-call]
        return reply, delay

    class ScriptedLLM(CustomLLM):
        def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
            reply, delay = pick(model, messages, kwargs.get("optional_params") or {})
            if delay:
                time.sleep(delay)
            return build(model, reply, messages)

        async def acompletion(
            self, model: str, messages: list[Any], *args: Any, **kwargs: Any
        ) -> ModelResponse:
            reply, delay = pick(model, messages, kwargs.get("optional_params") or {})
            if delay:
                await asyncio.sleep(delay)
            return build(model, reply, messages)

    litellm.custom_provider_map = [
        *litellm.custom_provider_map,
        {"provider": PROVIDER, "custom_handler": ScriptedLLM()},
    ]
