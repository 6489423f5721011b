"""Every setting is declared once (rlm.run.settings.Settings) and taken from each place the
declaration names: its flag on `rlm ask`, its RLM_* variable, its config-file key. A value
that does not fit is one line naming where it came from, exit 2 for a flag or variable and
4 for the config file; `rlm ask --help` and the README's tables say what the declaration says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, cli_env, write_script
from openai_stub import OpenAIStub

from rlm.errors import ConfigError, ExitCode, RlmError, UsageError
from rlm.run.options import Option
from rlm.run.settings import OPTIONS, load_settings

KEY = "sk-options-test-0123456789abcdef"


def _values(tmp_path: Path, model: str, executor: str, api_base: str) -> dict[str, Any]:
    """A value other than the default for every declared setting, each one a run can go on with.
    A setting added to the declaration must be added here: the tests below take it from each source."""
    return {
        "model": model,
        # A sub-model with a Batch API (--batch: the run asks the endpoint for one before its first step).
        "sub_model": "openai/options-stub",
        "api_base": api_base,
        "api_key": KEY,
        "protocol": "tools",
        "gguf": str(tmp_path / "none.gguf"),
        "max_steps": 7,
        "max_depth": 2,
        "cell_timeout": 25.0,
        "max_calls": 50,
        "max_tokens": 900_000,
        "max_cost": 5.0,
        "max_time": 300.0,
        "concurrency": 3,
        "max_observation_chars": 3000,
        "history_tokens": 9000,
        "sub_prompt_tokens": 5000,
        "reply_max_tokens": 1000,
        "request_timeout": 77.0,
        "retries": 1,
        "retry_base_delay": 0.02,
        "temperature": 0.5,
        "memory_headroom_mb": 512,
        "trace_dir": str(tmp_path / "runs"),
        "trace": True,  # the one value a run that writes its trace can have; False: below
        "cache_dir": str(tmp_path / "cache"),
        "memory": str(tmp_path / "memory.sqlite3"),
        "no_memory": True,
        "no_cache": True,
        "no_reroute": True,
        "mode": "rlm",  # the one mode this script (an investigation) answers under, as trace above
        "strict": True,  # the answer is what the run printed: grounded
        "order": "mtime",  # one input: any order reads it the same
        "skip_bad": True,
        "router_strategy": "least-busy",  # read whether or not a model_list names the model
        "include": "*.log",  # a directory's files: this run reads one file, given by name
        "exclude": "*.gz",
        "max_file_mb": 64.0,
        # The log's whole hour (as it is resolved and recorded: an ISO time stays as it is).
        "since": "2026-03-01T09:00:00",
        "until": "2026-03-01T11:00:00",
        "executor": executor,  # a scheduler that answers: the run connects before its first step
        "batch": True,
    }


def _log(path: Path) -> Path:
    path.write_text(
        "".join(
            f'10.0.0.{i % 7} - - [01/Mar/2026:10:00:{i % 60:02d} +0000] "GET /a{i % 5} HTTP/1.1" 200 {i}\n'
            for i in range(60)
        )
    )
    return path


def _model(tmp_path: Path) -> str:
    # The answer holds the API key: it is printed masked only when the key reached the settings.
    answer = json.dumps({"answer": f"key {KEY}", "citations": ["F1"]})
    return write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": f"print('key {KEY}')"}},
            {"tool": "final", "args": {"answer": f"key {KEY}"}},
            answer,
        ],
    )


def _env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    """The test's environment without the RLM_* values every CLI test gets: here each setting
    comes from the one source under test."""
    env = {k: v for k, v in cli_env(tmp_path).items() if not k.startswith("RLM_")}
    return {**env, "RLM_WARM_AUTO": "0", **extra}  # not a setting of the run: no warm process left behind


def _ask(tmp_path: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    data = _log(tmp_path / "access.log")
    return subprocess.run(
        [sys.executable, "-m", "rlm", "ask", str(data), "which key?", *args],
        cwd=tmp_path,
        env=_env(tmp_path, env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _flag_args(values: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, o in OPTIONS.items():
        if not o.flags or o.switch and values[name] != o.switched():
            continue
        args += [o.flags[-1]] if o.switch else [o.flags[-1], str(values[name])]
    return args


def _env_text(value: Any) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def _recorded(values: dict[str, Any], tmp_path: Path) -> None:
    """The run's trace records every setting as given (the key excepted: it is never recorded)."""
    traces = list(Path(values["trace_dir"]).glob("*.json"))
    assert len(traces) == 1, traces
    recorded = json.loads(traces[0].read_text())["settings"]
    expected = {k: v for k, v in values.items() if k != "api_key"}
    assert recorded == expected


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A Dask scheduler on 127.0.0.1 (its workers threads of this process: no task runs here)."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address.replace("tcp://", "dask://")


@pytest.fixture(scope="module")
def batch_api() -> Iterator[str]:
    """An OpenAI-style server on 127.0.0.1 with a Batch API (the run's script makes no sub-call)."""
    with OpenAIStub([]) as stub:
        yield stub.api_base


def _declared_values(
    tmp_path: Path, executor: str = "dask://127.0.0.1:1", api_base: str = "http://127.0.0.1:9/v1"
) -> dict[str, Any]:
    values = _values(tmp_path, _model(tmp_path), executor, api_base)
    assert set(values) == set(OPTIONS), "every declared setting needs a test value"
    for name, value in values.items():
        assert (
            OPTIONS[name].coerce(value) == value
            and value != OPTIONS[name].default
            or name in ("trace", "mode")
        )
    return values


@pytest.mark.parametrize("source", ["flags", "environment", "config"])
def test_every_setting_is_taken_from_each_place_it_is_declared(
    tmp_path: Path, source: str, scheduler: str, batch_api: str
) -> None:
    values = _declared_values(tmp_path, scheduler, batch_api)
    flagged = {n for n, o in OPTIONS.items() if o.flags}
    env: dict[str, str] = {}
    args: list[str] = []
    if source == "flags":
        args = _flag_args(values)
        # Settings with no flag: from their variable.
        env = {o.env: _env_text(values[n]) for n, o in OPTIONS.items() if n not in flagged}
    elif source == "environment":
        env = {o.env: _env_text(values[n]) for n, o in OPTIONS.items()}
    else:
        config = tmp_path / "config.toml"
        config.write_text("".join(f"{o.key} = {json.dumps(values[n])}\n" for n, o in OPTIONS.items()))
        env = {"RLM_CONFIG": str(config)}
    proc = _ask(tmp_path, args, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "key [REDACTED]\n"
    _recorded(values, tmp_path)


def test_a_switch_sets_the_opposite_of_its_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-trace, RLM_TRACE=0 and `trace = false` are one setting (tests/test_trace.py runs
    `rlm ask --no-trace`; the flags of the others are given in the run of every setting above)."""
    switches = [o for o in OPTIONS.values() if o.switch]
    assert switches and all(o.flags for o in switches)
    for o in switches:
        for key in [k for k in os.environ if k.startswith("RLM_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
        assert getattr(load_settings({o.name: o.switched()}), o.name) == o.switched()
        # The variable as --help names it (RLM_TRACE=0).
        variable, value = o.env_text().split("=")
        monkeypatch.setenv(variable, value)
        assert getattr(load_settings(), o.name) == o.switched()
        monkeypatch.delenv(o.env)
        config = tmp_path / "switch.toml"
        config.write_text(f"{o.key} = {json.dumps(o.switched())}\n")
        monkeypatch.setenv("RLM_CONFIG", str(config))
        assert getattr(load_settings(), o.name) == o.switched()
        monkeypatch.delenv("RLM_CONFIG")


def _bad(o: Option, for_config: bool) -> Any:
    """A value the setting refuses: a word where a number goes, a blank or a table where a text goes."""
    if o.kind is bool:
        return "maybe"
    if o.kind is str:
        return {"a": 1} if for_config else "   "
    return "many"


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_a_bad_value_names_its_source_with_the_documented_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    o = OPTIONS[name]
    for key in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))

    def refused(flags: dict[str, Any] | None = None) -> RlmError:
        with pytest.raises(RlmError) as caught:
            load_settings(flags)
        return caught.value

    if o.flags:
        error = refused({name: _bad(o, False)})
        assert isinstance(error, UsageError) and error.exit_code == ExitCode.USAGE
        assert error.message.startswith(f"{o.flag} must be {o.rule.expects()}, not ")
    monkeypatch.setenv(o.env, _bad(o, False))
    error = refused()
    assert isinstance(error, UsageError) and error.exit_code == ExitCode.USAGE
    assert error.message.startswith(f"{o.env} must be {o.rule.expects()}, not ")
    monkeypatch.delenv(o.env)
    config = tmp_path / "config.toml"
    bad = _bad(o, True)
    config.write_text(
        f"{o.key} = {{ a = 1 }}\n" if isinstance(bad, dict) else f"{o.key} = {json.dumps(bad)}\n"
    )
    monkeypatch.setenv("RLM_CONFIG", str(config))
    error = refused()
    assert isinstance(error, ConfigError) and error.exit_code == ExitCode.CONFIG
    assert error.message.startswith(f"config file {config}: {o.key} must be {o.rule.expects()}, not ")


def test_a_bad_flag_value_is_one_line_and_exit_2(tmp_path: Path) -> None:
    values = _declared_values(tmp_path)
    proc = _ask(tmp_path, ["-m", values["model"], "--concurrency", "0"], {})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "rlm: --concurrency must be a whole number (at least 1, at most 256), not 0\n"


def test_ask_help_shows_each_declared_flag_with_its_variable_and_default(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", "--help"],
        cwd=tmp_path,
        env=_env(tmp_path, {}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # Compared without white space: help wraps its lines, at spaces and hyphens.
    shown = "".join(proc.stdout.split())
    for o in OPTIONS.values():
        if o.flags:
            flag = ", ".join(o.flags) + ("" if o.switch else f" {o.flag.lstrip('-').upper()}")
            assert "".join(f"{flag} {o.help_line()}".split()) in shown, (flag, proc.stdout)


def _check(readme: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_tables.py"), "--check", "--readme", str(readme)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_readme_tables_are_the_ones_written_from_the_declarations(tmp_path: Path) -> None:
    proc = _check(ROOT / "README.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # A row edited by hand is found, and shown as the difference to write back.
    stale = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `--max-steps` |"))
    stale.write_text(text.replace(row, row.replace("| 20 |", "| 30 |")), encoding="utf-8")
    proc = _check(stale)
    assert proc.returncode == 1
    assert f"-{row.replace('| 20 |', '| 30 |')}" in proc.stdout and f"+{row}" in proc.stdout
