"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions API.

Tests point litellm at it (`openai/<name>` with `api_base`) so the whole
network path runs: HTTP, JSON, tool calls, errors. Replies use the same
shapes as the scripted provider (rlm/scripted.py): a string, or an object
with `content`, `tool` + `args`, `tool_calls`, `delay`, `status` (an HTTP
error code to answer with).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OpenAIStub:
    def __init__(self, replies: list[Any], default: Any = None) -> None:
        self.replies = list(replies)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                    reply = stub.replies.pop(0) if stub.replies else stub.default
                if reply is None:
                    self._json(
                        400, {"error": {"message": "stub has no reply left", "type": "invalid_request_error"}}
                    )
                    return
                if isinstance(reply, str):
                    reply = {"content": reply}
                if reply.get("delay"):
                    time.sleep(float(reply["delay"]))
                if reply.get("status"):
                    self._json(
                        int(reply["status"]), {"error": {"message": reply.get("message", "stub error")}}
                    )
                    return
                self._json(200, stub.completion(body, reply))

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def completion(self, body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
        calls = list(reply.get("tool_calls") or [])
        if "tool" in reply:
            calls.insert(0, {"name": reply["tool"], "args": reply.get("args", {})})
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        if calls:
            message["tool_calls"] = [
                {
                    "id": "call_" + uuid.uuid4().hex[:10],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c.get("args", {}))},
                }
                for c in calls
            ]
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:10],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {
                "prompt_tokens": max(1, prompt_chars // 4),
                "completion_tokens": max(1, len(str(reply.get("content") or "")) // 4),
                "total_tokens": max(2, prompt_chars // 4 + 1),
            },
        }

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
