"""The Python API (`rlm.ask`, `rlm.aask`, `rlm.estimate`) over real logs with the scripted model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, ROOT, run_cli, write_script

import rlm
from rlm.errors import ExitCode

SPIN = "x = 0\nwhile True:\n    x += 1"


def _count(path: Path, needle: str) -> int:
    return sum(1 for line in path.read_text(errors="replace").splitlines() if needle in line)


def _answering(tmp_path: Path, expected: int, name: str = "s.json", delay: float = 0.0) -> str:
    """A script that greps, counts by code, drafts and has the synthesis cite the count (F2)."""
    answer = json.dumps({"answer": str(expected), "explanation": "Counted by code.", "citations": ["F2"]})
    return write_script(
        tmp_path / name,
        [
            {"tool": "grep", "args": {"pattern": '" 404 ', "max_matches": 3}, "delay": delay},
            {
                "tool": "execute",
                "args": {"code": "n = sum(1 for l in context_lines if '\" 404 ' in l)\nprint(n)"},
                "delay": delay,
            },
            {"tool": "final", "args": {"answer": f"{expected} requests returned 404"}, "delay": delay},
            answer,
        ],
    )


def test_ask_answers_over_a_real_log_with_a_typed_result(
    isolated: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = FIXTURES / "access.log"
    expected = _count(log, '" 404 ')
    model = _answering(isolated, expected)
    events: list[Any] = []
    result = rlm.ask(
        log, "how many requests returned 404?", model=model, retry_base_delay=0.01, progress=events.append
    )

    assert isinstance(result, rlm.Result)
    assert result.answer == str(expected) and result.ok and result.status == "final" and result.exit_code == 0
    assert result.mode == "rlm" and result.grounded is True and "F2" in result.supporting
    [cited] = result.citations
    assert isinstance(cited, rlm.Citation) and cited.id == "F2" and str(expected) in cited.text
    assert [f.kind for f in result.findings] == ["grep", "result", "final_draft"]
    assert isinstance(result.usage, rlm.Usage) and result.usage.calls == 4 and result.cost is None
    # The trace is where the result says, absolute, named by the run id.
    assert result.trace is not None and Path(result.trace).is_absolute() and Path(result.trace).is_file()
    assert result.run_id == Path(result.trace).stem
    assert json.loads(Path(result.trace).read_text())["answer"] == str(expected)
    # Progress: the run's own typed events, steps included; the library prints nothing.
    from rlm.run.events import Phase, Step

    assert [e.action.name for e in events if isinstance(e, Step)] == ["grep", "execute", "final"]
    assert any(isinstance(e, Phase) for e in events)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_result_has_the_fields_of_ask_json(tmp_path: Path, isolated: Path) -> None:
    """Result.to_dict is the document `rlm ask --json` prints for the same run (run_id added)."""
    log = FIXTURES / "access.log"
    expected = _count(log, '" 404 ')
    proc = run_cli(
        [
            "ask",
            str(log),
            "how many 404s?",
            "-m",
            _answering(tmp_path, expected, "cli.json"),
            "--json",
            "-q",
            "--no-memory",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    result = rlm.ask(
        log,
        "how many 404s?",
        model=_answering(tmp_path, expected, "api.json"),
        retry_base_delay=0.01,
        no_memory=True,
    )
    mine = result.to_dict()
    assert set(mine) - {"run_id"} == set(doc)
    for key in (
        "answer",
        "explanation",
        "citations",
        "status",
        "exit_code",
        "grounded",
        "supporting",
        "mode",
        "usage",
    ):
        assert mine[key] == doc[key], key


def test_exceptions_carry_the_documented_exit_codes(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FIXTURES / "access.log"
    with pytest.raises(rlm.InputError) as missing:
        rlm.ask(isolated / "nope.log", "q", model="scripted/x.json")
    assert missing.value.exit_code == ExitCode.INPUT == 3 and "nope.log" in missing.value.message

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(rlm.ConfigError) as config:
        rlm.ask(log, "q", model="gpt-4o-mini")
    assert config.value.exit_code == 4 and "OPENAI_API_KEY" in config.value.message

    with pytest.raises(rlm.UsageError) as bad:
        rlm.ask(log, "q", model="scripted/x.json", max_calls=0)
    assert bad.value.exit_code == 2
    with pytest.raises(rlm.UsageError) as unknown:
        rlm.ask(log, "q", model="scripted/x.json", max_callz=3)
    assert unknown.value.exit_code == 2 and "max_callz" in unknown.value.message

    # A provider that keeps failing: exit 5, the run's result (and trace) on the exception.
    failing = write_script(isolated / "fail.json", {"default": {"error": "server"}})
    with pytest.raises(rlm.ProviderError) as provider:
        rlm.ask(log, "how many 404s?", model=failing, retries=0, retry_base_delay=0.01)
    assert provider.value.exit_code == 5
    assert isinstance(provider.value, rlm.errors.ProviderError) and isinstance(provider.value, rlm.RlmError)
    assert provider.value.trace_path and Path(provider.value.trace_path).is_file()

    # Out of model calls after a look: exit 6, the partial answer on the exception's result.
    expected = _count(log, '" 404 ')
    with pytest.raises(rlm.BudgetExceeded) as budget:
        rlm.ask(
            log,
            "how many 404s?",
            model=_answering(isolated, expected, "b.json"),
            max_calls=3,
            retry_base_delay=0.01,
        )
    assert budget.value.exit_code == 6
    partial = budget.value.result
    assert partial is not None and partial.status == "budget" and partial.exit_code == 6
    assert partial.trace and Path(partial.trace).is_file()

    # A model that never says anything: no answer, exit 1, nothing to return.
    silent = write_script(isolated / "silent.json", {"rules": [{"match": ".", "reply": ""}]})
    with pytest.raises(rlm.NoAnswer) as none:
        rlm.ask(log, "what is the busiest hour?", model=silent, retry_base_delay=0.01)
    assert none.value.exit_code == 1 and none.value.result is not None and none.value.result.answer is None


def test_aask_runs_two_questions_at_once(isolated: Path) -> None:
    log = FIXTURES / "access.log"
    expected = _count(log, '" 404 ')
    spans: dict[str, list[float]] = {"a": [], "b": []}

    def seen(name: str) -> Any:
        return lambda event: spans[name].append(time.monotonic())

    async def both() -> list[rlm.Result]:
        return await asyncio.gather(
            rlm.aask(
                log,
                "how many 404s?",
                model=_answering(isolated, expected, "a.json", 0.5),
                retry_base_delay=0.01,
                progress=seen("a"),
            ),
            rlm.aask(
                log,
                "how many 404s?",
                model=_answering(isolated, expected, "b.json", 0.5),
                retry_base_delay=0.01,
                progress=seen("b"),
            ),
        )

    first, second = asyncio.run(both())
    assert first.answer == second.answer == str(expected)
    assert first.run_id != second.run_id
    # Each run's events span its whole life: the two spans overlap, so they ran at once.
    a0, a1, b0, b1 = min(spans["a"]), max(spans["a"]), min(spans["b"]), max(spans["b"])
    assert a0 < b1 and b0 < a1, (a0, a1, b0, b1)


def test_cancelling_aask_stops_the_run_and_keeps_its_trace(isolated: Path) -> None:
    """The awaiting task is freed at once; the run stops at its thread's next Python instruction
    (here: when the spinning cell hits its 4 s limit), its trace finished as interrupted."""
    log = FIXTURES / "access.log"
    model = write_script(
        isolated / "spin.json", {"replies": [{"tool": "execute", "args": {"code": SPIN}}], "default": "x"}
    )
    running = asyncio.Event()

    async def go() -> float:
        loop = asyncio.get_running_loop()

        def progress(event: Any) -> None:
            if "running execute" in str(getattr(event, "what", "")):
                loop.call_soon_threadsafe(running.set)

        task = asyncio.create_task(rlm.aask(log, "spin", model=model, cell_timeout=4, progress=progress))
        await asyncio.wait_for(running.wait(), 60)
        await asyncio.sleep(0.5)  # the cell is spinning
        task.cancel()
        cancelled = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - cancelled

    took = asyncio.run(go())
    assert took < 2.0, took  # freed long before the cell's remaining 3.5 s run out
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((isolated / "traces").glob("*.json")):
        time.sleep(0.1)
    [trace] = sorted((isolated / "traces").glob("*.json"))
    doc = json.loads(trace.read_text())
    assert doc["status"] == "interrupted" and doc["exit_code"] == 130
    assert doc.get("answer") is None and len(doc["steps"]) <= 1  # stopped, not carried on to an answer


def test_estimate_bounds_a_run_without_calling_a_model(tmp_path: Path) -> None:
    log = FIXTURES / "access.log"
    found = rlm.estimate(
        log, "how many 404s?", model="gpt-4o-mini", max_calls=10, max_tokens=100_000, reply_max_tokens=1000
    )
    assert isinstance(found, rlm.Estimate)
    assert found.max_calls == 10 and found.max_tokens == 100_000 and found.max_completion_tokens == 10_000
    assert found.input_bytes == log.stat().st_size
    # The dearest way to spend it: every reply at its longest, the rest prompt, at litellm's prices.
    from rlm.model.client import load_litellm

    price = load_litellm().model_cost["gpt-4o-mini"]
    dearest = 90_000 * price["input_cost_per_token"] + 10_000 * price["output_cost_per_token"]
    assert found.max_cost_usd == pytest.approx(dearest)
    assert rlm.estimate(log, "q", model="gpt-4o-mini", max_cost=0.001).max_cost_usd == 0.001
    assert rlm.estimate(log, "q", model="scripted/x.json").max_cost_usd is None  # no price, never $0
    with pytest.raises(rlm.InputError):
        rlm.estimate(tmp_path / "nope.log", "q", model="gpt-4o-mini")


def test_ask_estimate_prints_the_bounds_and_calls_no_model(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = write_script(tmp_path / "s.json", {"replies": ["x"], "log": str(calls)})
    proc = run_cli(
        [
            "ask",
            str(FIXTURES / "access.log"),
            "how many 404s?",
            "-m",
            model,
            "--max-calls",
            "7",
            "--estimate",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "model calls:  at most 7" in proc.stdout and "cost:         at most unknown" in proc.stdout
    assert not calls.exists() and not (tmp_path / "traces").exists()
    doc = json.loads(
        run_cli(
            ["ask", str(FIXTURES / "access.log"), "q", "-m", model, "--estimate", "--json"], cwd=tmp_path
        ).stdout
    )
    assert doc["max_calls"] == 200 and doc["model"] == model


def test_import_rlm_is_cheap_and_typed() -> None:
    code = (
        "import sys, rlm\n"
        "print([m for m in ('litellm', 'typer', 'rich', 'duckdb', 'numpy', 'mcp') if m in sys.modules])\n"
        "print(all(hasattr(rlm, name) for name in rlm.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True"]
    assert (ROOT / "rlm" / "py.typed").is_file()
    assert (
        rlm.BudgetExceeded.exit_code == 6 and rlm.NoAnswer.exit_code == 1 and rlm.ProviderError.exit_code == 5
    )
