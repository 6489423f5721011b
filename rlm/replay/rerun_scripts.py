"""Scripts for the scripted provider from a trace that holds no cassette.

Traces written before rlm recorded its model calls (rlm.run.cassette) can still be re-run:
their recorded replies become two scripts for the scripted provider
(rlm/model/scripted.py), one for the root model (its turns, then its synthesis) and one
for the sub-model (child nodes' turns and syntheses in the order they were asked for,
plus plain sub-calls matched by their prompt). This rebuilds the engine's call order from
the steps, so it cannot know of calls the steps do not show: a second, widened synthesis
pass is not replayed. A trace with a cassette is re-run from it instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlm.replay.render import child_steps


def _scripted(reply: dict[str, Any] | None) -> dict[str, Any]:
    """A recorded reply as a scripted-provider reply (tool arguments kept as the raw text)."""
    reply = reply or {}
    out: dict[str, Any] = {"content": reply.get("content") or None}
    calls = reply.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [{"name": c.get("name", ""), "args": c.get("arguments") or "{}"} for c in calls]
    return out


def _synthesis_reply(source: Any, content: Any, error: Any) -> dict[str, Any] | None:
    """What the synthesis call of a node should get; None when the run made no such call."""
    if source == "synthesis":
        return {"content": str(content or "")}
    if source in ("draft", "findings"):
        # The call failed or answered nothing usable; an empty reply leads to the same fallback.
        return {"content": ""}
    if error:
        return {"error": "bad_request", "message": str(error)}
    return None  # "none" without an error: nothing to synthesize from, no call was made


def original_protocol(doc: dict[str, Any]) -> str:
    chosen = (doc.get("settings") or {}).get("protocol")
    if chosen in ("tools", "text"):
        return str(chosen)
    for step in doc.get("steps") or []:
        call = step.get("model_call") or {}
        if (call.get("reply") or {}).get("tool_calls"):
            return "tools"
        if any(m.get("role") == "tool" for m in call.get("messages") or []):
            return "tools"
    return "text"


def build_scripts(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(root script, sub-model script) reproducing every model call of the run."""
    from rlm.run import prompts

    steps_of: dict[str, list[dict[str, Any]]] = {}
    for s in doc.get("steps") or []:
        steps_of.setdefault(s["node"], []).append(s)
    for steps in steps_of.values():
        steps.sort(key=lambda s: s["index"])
    parents = child_steps(doc)
    nodes = doc.get("nodes") or []
    kids: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for n in nodes:
        if n.get("parent"):
            kids.setdefault((n["parent"], parents.get(n["id"])), []).append(n)

    sub_replies: list[dict[str, Any]] = []

    def child(node: dict[str, Any]) -> None:
        # A child's calls, in the order they are made: its turn, the grandchildren
        # that turn started, the next turn ..., then its synthesis.
        for step in steps_of.get(node["id"], []):
            sub_replies.append(_scripted((step.get("model_call") or {}).get("reply")))
            for grandchild in kids.get((node["id"], step["index"]), []):
                child(grandchild)
        reply = _synthesis_reply(node.get("answer_source"), node.get("answer"), None)
        if reply is not None:
            sub_replies.append(reply)

    root_replies: list[dict[str, Any]] = []
    for root in (n for n in nodes if not n.get("parent")):
        for step in steps_of.get(root["id"], []):
            root_replies.append(_scripted((step.get("model_call") or {}).get("reply")))
            for c in kids.get((root["id"], step["index"]), []):
                child(c)
    synthesis = doc.get("synthesis") or {}
    reply = (
        {"content": str((synthesis.get("reply") or {}).get("content") or "")}
        if synthesis.get("reply")
        else _synthesis_reply(synthesis.get("source"), None, synthesis.get("error"))
    )
    if reply is not None:
        root_replies.append(reply)

    # Plain sub-calls (llm_query on a small slice, partition_map chunks) may run
    # in parallel: each is matched by its own prompt, once.
    head = re.escape(prompts.SUBQUERY_SYSTEM[:60])
    rules = [
        {
            "match": f"^system: {head}.*Question: {re.escape(str(c.get('question', '')))}\\n\\n"
            f"Excerpt \\({re.escape(str(c.get('slice', '')))}\\):",
            "reply": {"content": str(c.get("answer") or "")},
            "times": 1,
        }
        for c in doc.get("subcalls") or []
    ]
    return {"replies": root_replies}, {"replies": sub_replies, "rules": rules}


def write_scripts(doc: dict[str, Any], workdir: Path) -> tuple[Path, Path]:
    """The two scripts, written in `workdir`: (root script, sub-model script)."""
    root_script, sub_script = build_scripts(doc)
    root, sub = workdir / "root.json", workdir / "sub.json"
    root.write_text(json.dumps(root_script), encoding="utf-8")
    sub.write_text(json.dumps(sub_script), encoding="utf-8")
    return root, sub
