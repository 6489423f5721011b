"""Several deployments under one model name (`[[model_list]]`, litellm's Router), over real HTTP:
two OpenAI-style servers on 127.0.0.1 serve one conversation between them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from conftest import latest_trace, run_cli
from openai_stub import OpenAIStub

KEY_A = "sk-deployment-a-0123456789abcdef"
KEY_B = "sk-deployment-b-fedcba9876543210"


class Conversation:
    """One run's replies, whichever server is asked: each request takes the next one."""

    def __init__(self, replies: list[Any], default: Any) -> None:
        self.replies = list(replies)
        self.default = default
        self.lock = threading.Lock()

    def __call__(self, _n: int) -> Any:
        with self.lock:
            if self.replies:
                return self.replies.pop(0)
            return self.default() if callable(self.default) else self.default


def _config(tmp_path: Path, *bases: str, extra: str = "") -> None:
    entries = "".join(
        f"""
[[model_list]]
model_name = "team"
litellm_params = {{ model = "openai/stub", api_base = "{base}", api_key = "os.environ/TEAM_KEY_{n}" }}
"""
        for n, base in enumerate(bases)
    )
    folder = tmp_path / ".config" / "rlm"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(extra + entries, encoding="utf-8")


def _env() -> dict[str, str]:
    return {"TEAM_KEY_0": KEY_A, "TEAM_KEY_1": KEY_B}


def _answered(trace: dict[str, Any]) -> list[str]:
    """The deployment that answered each call of the run, in order, as the trace's calls record it."""
    return [c["deployment"] for c in trace["cassette"]["calls"] if "reply" in c]


def test_a_deployment_that_asks_to_wait_is_left_for_the_other_at_once(
    tmp_path: Path, apache_log: Path
) -> None:
    total = apache_log.read_text().count("\n")
    talk = Conversation(
        ["```python\nprint(len(context_lines))\n```", f'FINAL("{total}")'], default=f"{total} [F1]"
    )
    busy = OpenAIStub(
        [], default={"status": 429, "headers": {"Retry-After": "30"}, "message": "rate limited"}
    )
    with busy, OpenAIStub([], default=talk) as free:
        _config(tmp_path, busy.api_base, free.api_base)
        began = time.monotonic()
        proc = run_cli(["ask", str(apache_log), "how many lines?", "-m", "team"], cwd=tmp_path, env=_env())
        took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(total)
    assert took < 25, f"the run waited for the busy deployment ({took:.1f} s)"
    assert len(busy.requests) <= 1, "a deployment that asked to wait 30 s was asked again"
    trace = latest_trace(tmp_path)
    assert [d["id"] for d in trace["deployments"]] == ["team#1", "team#2"]
    assert {d["api_base"] for d in trace["deployments"]} == {busy.api_base, free.api_base}
    assert set(_answered(trace)) == {"team#2"} and len(_answered(trace)) == 3
    steps = [s["model_call"]["deployment"] for s in trace["steps"]]
    assert steps == ["team#2", "team#2"]
    # each server got its own key; no key is written anywhere the run leaves text
    assert all(r["headers"]["Authorization"] == f"Bearer {KEY_B}" for r in free.requests)
    text = json.dumps(trace) + proc.stderr
    assert KEY_A not in text and KEY_B not in text


def test_calls_spread_over_the_deployments_and_one_budget_counts_them_all(
    tmp_path: Path, apache_log: Path
) -> None:
    counter = iter(range(1, 1000))
    # a new look each turn, never an answer: the run goes on until its budget stops it
    talk = Conversation([], default=lambda: f"```python\nprint(context_lines[{next(counter)}][:40])\n```")
    with OpenAIStub([], default=talk) as one, OpenAIStub([], default=talk) as two:
        _config(tmp_path, one.api_base, two.api_base, extra='router_strategy = "simple-shuffle"\n')
        proc = run_cli(
            ["ask", str(apache_log), "how many lines?", "-m", "team", "--max-calls", "14"],
            cwd=tmp_path,
            env=_env(),
        )
    trace = latest_trace(tmp_path)
    assert trace["settings"]["router_strategy"] == "simple-shuffle"
    sent = len(one.requests) + len(two.requests)
    answered = _answered(trace)
    assert sent == len(answered) == trace["totals"]["calls"] == 14, (sent, len(answered), proc.stderr)
    # 14 calls shuffled over two idle deployments: both are used (all on one: 1 chance in 8,192)
    assert set(answered) == {"team#1", "team#2"}
    assert answered.count("team#1") == len(one.requests) and answered.count("team#2") == len(two.requests)
    logs = run_cli(["logs", "--json", "-n", "1"], cwd=tmp_path)
    assert json.loads(logs.stdout)[0]["deployments"] == {
        "team#1": len(one.requests),
        "team#2": len(two.requests),
    }


def test_when_every_deployment_asks_to_wait_the_run_waits_as_asked(tmp_path: Path, apache_log: Path) -> None:
    total = apache_log.read_text().count("\n")
    talk = Conversation(
        ["```python\nprint(len(context_lines))\n```", f'FINAL("{total}")'], default=f"{total} [F1]"
    )
    wait = {"status": 429, "headers": {"Retry-After": "2"}, "message": "rate limited"}
    with OpenAIStub([wait], default=talk) as one, OpenAIStub([wait], default=talk) as two:
        _config(tmp_path, one.api_base, two.api_base)
        began = time.monotonic()
        proc = run_cli(
            ["ask", str(apache_log), "how many lines?", "-m", "team", "--jsonl"], cwd=tmp_path, env=_env()
        )
        took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    retries = [e for e in events if e.get("event") == "retry"]
    # the first call met both (each 429, in either order), then waited the 2 s they asked for;
    # the calls after it go to either (the router's shuffle): every request is one of those
    trace = latest_trace(tmp_path)
    assert len(one.requests) >= 1 and len(two.requests) >= 1
    assert len(one.requests) + len(two.requests) == 2 + trace["totals"]["calls"]
    assert any(r["wait_s"] >= 1.9 for r in retries), retries
    assert took >= 2
    assert [r["error"] for r in retries if r["wait_s"] >= 1.9] == [
        "every deployment of team failed and is left alone for 2 s"
    ]
    assert trace["status"] == "final" and trace["answer"] == str(total)


def test_a_model_list_that_cannot_work_is_one_line_before_any_call(tmp_path: Path, apache_log: Path) -> None:
    with OpenAIStub([], default="unused") as stub:
        _config(tmp_path, stub.api_base)
        unset = run_cli(["ask", str(apache_log), "lines?", "-m", "team"], cwd=tmp_path)
        assert unset.returncode == 4 and unset.stdout == ""
        assert (
            unset.stderr.strip()
            .splitlines()[-1]
            .endswith("deployment team#1 (openai/stub): api_key names TEAM_KEY_0, which is not set")
        ), unset.stderr
        (tmp_path / ".config" / "rlm" / "config.toml").write_text(
            '[[model_list]]\nmodel_name = "team"\nlitellm_params = { api_base = "http://127.0.0.1:9/v1" }\n'
        )
        shapeless = run_cli(["ask", str(apache_log), "lines?", "-m", "team"], cwd=tmp_path, env=_env())
        assert (
            shapeless.returncode == 4
            and "model_list entry 1 (team) needs litellm_params with a model" in (shapeless.stderr)
        )
        assert "Traceback" not in unset.stderr + shapeless.stderr
        assert stub.requests == []


def test_a_group_that_has_used_its_attempts_falls_back_to_the_next(tmp_path: Path, apache_log: Path) -> None:
    """fallbacks = [{ team = ["spare"] }]: the team's one deployment asks to wait 300 s (past what
    a run waits), so each call goes on to the spare group at once, said, within one budget; a
    fallback to a group that does not exist is one line, exit 4, before any call."""
    total = apache_log.read_text().count("\n")
    talk = Conversation(
        ["```python\nprint(len(context_lines))\n```", f'FINAL("{total}")'], default=f"{total} [F1]"
    )
    busy = OpenAIStub(
        [], default={"status": 429, "headers": {"Retry-After": "300"}, "message": "rate limited"}
    )
    with busy, OpenAIStub([], default=talk) as spare:
        spare_entry = f"""
[[model_list]]
model_name = "spare"
litellm_params = {{ model = "openai/stub", api_base = "{spare.api_base}", api_key = "os.environ/TEAM_KEY_1" }}
"""
        _config(tmp_path, busy.api_base, extra='fallbacks = [{ team = ["spare"] }]\n' + spare_entry)
        began = time.monotonic()
        proc = run_cli(
            ["ask", str(apache_log), "how many lines?", "-m", "team", "--jsonl", "--max-calls", "3"],
            cwd=tmp_path,
            env=_env(),
        )
        took = time.monotonic() - began
        assert proc.returncode == 0, proc.stderr
        assert took < 60, f"the run waited for the busy group ({took:.1f} s)"
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        fell = [e for e in events if e.get("event") == "retry"]
        assert fell and all("falling back to spare" in e["error"] for e in fell), fell
        assert fell[0]["wait_s"] == 0 and "300" in fell[0]["error"]
        trace = latest_trace(tmp_path)
        assert trace["status"] == "final" and trace["answer"] == str(total)
        assert set(_answered(trace)) == {"spare#1"} and len(_answered(trace)) == 3 == trace["totals"]["calls"]
        assert {d["id"] for d in trace["deployments"]} == {"team#1", "spare#1"}
        assert len(busy.requests) >= 1 and len(spare.requests) == 3
        assert all(r["headers"]["Authorization"] == f"Bearer {KEY_B}" for r in spare.requests)

        config = tmp_path / ".config" / "rlm" / "config.toml"
        config.write_text(config.read_text().replace('["spare"]', '["nowhere"]'))
        asked = len(busy.requests) + len(spare.requests)
        bad = run_cli(["ask", str(apache_log), "lines?", "-m", "team"], cwd=tmp_path, env=_env())
        assert bad.returncode == 4 and bad.stdout == ""
        assert bad.stderr.strip().endswith("fallbacks name 'nowhere', which no [[model_list]] entry is"), (
            bad.stderr
        )
        assert len(busy.requests) + len(spare.requests) == asked
