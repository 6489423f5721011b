"""The first question about a file rlm has not seen: the table build a user waits for is told as it
goes (the live status line, `--jsonl` events), and stops at once when asked to."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import bigfiles
import pytest
from conftest import FIXTURES, run_cli, traces_in, write_script

MB = 1 << 20


def test_jsonl_tells_the_table_build_as_it_goes(tmp_path: Path) -> None:
    """A CSV big enough for a build of a few seconds: `table_build` events, each with its share
    done rising, the file's bytes, the seconds so far and (once the pace is known) the seconds
    left; then the run's answer, counted over the table it waited for."""
    path = tmp_path / "trips.csv"
    size = bigfiles.csv_rows(path, 96 * MB)
    records = sum(1 for _ in path.open("rb")) - 1
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": 'print(sql("SELECT count(*) AS n FROM log")[0][0])'}},
            {"tool": "final", "args": {"answer": str(records)}},
            str(records),
        ],
    )
    proc = run_cli(["ask", str(path), "how many trips?", "-m", model, "--jsonl"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    builds = [e for e in events if e["event"] == "table_build"]
    assert builds, "no table_build event"
    assert all(e["bytes"] == size for e in builds)
    done = [e["done"] for e in builds]
    assert done == sorted(done) and 0 < done[-1] <= 1
    assert all(e["seconds"] > 0 for e in builds)
    assert any(e["left_s"] is not None for e in builds) or len(builds) == 1
    # Told before the model's first step, which ran over the whole table.
    first_step = next(i for i, e in enumerate(events) if e["event"] == "step")
    assert max(i for i, e in enumerate(events) if e["event"] == "table_build") < first_step
    step = events[first_step]
    assert step["ok"] and step["shown"] == str(records)
    assert events[-2]["event"] == "answer" and events[-2]["answer"] == str(records)
    [trace] = traces_in(tmp_path)
    # The table was built while the run started: the first turn did not wait for it.
    assert trace["table_build"]["background"] is True and trace["table_build"]["seconds"] > 0
    # The second question finds it cached: nothing is built, in the background or before.
    again = run_cli(["ask", str(path), "how many trips?", "-m", model, "--jsonl"], cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not [line for line in again.stdout.splitlines() if '"table_build"' in line]
    second = traces_in(tmp_path)[-1]
    assert "table_build" not in second and second["steps"][0]["observation"]["preview"] == f"{records}\n"


def _build_held_until_the_first_step(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[bool]]:
    """Hold the table's build until the model's first step has ended: (the run's progress sink
    that lets it go, a list that gets whether that step ended before the table was built)."""
    import rlm.input.source as source_mod
    from rlm.run.events import Step

    gate = threading.Event()
    real_build = source_mod.ensure_table

    def held_build(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(60), "the first step never ended"
        return real_build(*args, **kwargs)

    monkeypatch.setattr(source_mod, "ensure_table", held_build)
    ended_first: list[bool] = []

    def progress(event: object) -> None:
        if isinstance(event, Step) and event.step == 1:
            ended_first.append(not gate.is_set())
            gate.set()

    return progress, ended_first


def test_the_first_turn_does_not_wait_for_the_table_and_sql_waits_for_it(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table's build is held until the model's first step has ended: that step (peek and a
    cell that does not query) ran while there was no table; the second step's sql() waited for
    the build and counted over the whole table; the model was told of the table once, with its
    columns. The real worker, locked down, reads the table placed after its lock-down."""
    import rlm.input.source as source_mod
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    expected = sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # this small file as a big one
    progress, first_step_ended_before_the_table = _build_held_until_the_first_step(monkeypatch)
    model = write_script(
        isolated / "s.json",
        [
            {"tool": "execute", "args": {"code": "print(peek(1, 1)[:20]); print(len(context_lines))"}},
            {
                "tool": "execute",
                "args": {"code": 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'},
            },
            {"tool": "final", "args": {"answer": str(expected)}},
            json.dumps({"answer": str(expected), "explanation": "Counted by SQL.", "citations": ["F2"]}),
        ],
    )
    settings = load_settings({"model": model, "retry_base_delay": 0.01})
    result = run_ask(settings, str(log), "How many requests returned 404?", progress=progress)
    assert first_step_ended_before_the_table == [True]
    assert result.answer == str(expected)
    [trace] = traces_in(isolated)
    first, second = trace["steps"][:2]
    assert first["observation"]["ok"] and "2000" in first["observation"]["preview"]
    assert second["observation"]["ok"], second["observation"]
    assert second["observation"]["preview"] == f"{expected}\n"
    assert second["told"].startswith("[the table is built]\nTable `log`")
    assert [s["index"] for s in trace["steps"] if "told" in s] == [2]
    assert trace["table_build"]["background"] is True
    assert trace["input"]["table_error"] is None


def test_sql_in_the_first_turn_waits_for_the_table_still_building(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's very first cell queries: the build is held until the worker has asked for
    the table (its sql() is waiting), then let go; the cell's count is over the whole table,
    and the model is told of the table once, after that first step."""
    import rlm.input.source as source_mod
    from rlm.run.engine import Engine
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    expected = sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # this small file as a big one
    asked, gate = threading.Event(), threading.Event()
    real_build, real_wait = source_mod.ensure_table, Engine.table_for_worker

    def held_build(*args: Any, **kwargs: Any) -> Any:
        assert asked.wait(60), "sql() never asked for the table"
        gate.set()
        return real_build(*args, **kwargs)

    def table_for_worker(self: Engine, whole: bool) -> tuple[str | None, str | None, bool]:
        if not gate.is_set():
            asked.set()  # the build is still held: the cell waits below
        return real_wait(self, whole)

    monkeypatch.setattr(source_mod, "ensure_table", held_build)
    monkeypatch.setattr(Engine, "table_for_worker", table_for_worker)
    count = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
    model = write_script(
        isolated / "s.json",
        [
            {"tool": "execute", "args": {"code": count}},
            {"tool": "final", "args": {"answer": str(expected)}},
            json.dumps({"answer": str(expected), "explanation": "Counted by SQL.", "citations": ["F1"]}),
        ],
    )
    settings = load_settings({"model": model, "retry_base_delay": 0.01})
    result = run_ask(settings, str(log), "How many requests returned 404?")
    assert asked.is_set() and gate.is_set()
    assert result.answer == str(expected)
    [trace] = traces_in(isolated)
    first = trace["steps"][0]
    assert first["observation"]["ok"] and first["observation"]["preview"] == f"{expected}\n", first
    assert first["told"].startswith("[the table is built]\nTable `log`")
    assert trace["table_build"]["background"] is True


@pytest.mark.parametrize("index_ahead", [False, True], ids=["indexed", "index-in-the-background"])
def test_a_memory_that_may_be_of_the_file_is_offered_before_its_table_is_built(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, index_ahead: bool
) -> None:
    """Memory holds a finding of a file of the same size and first bytes (its cache gone since):
    the run needs the file's sha256 before the model's first turn, and hashes it then rather
    than after the table's build. The build is held until the first step has ended: that step's
    prompt offers the memory, and the trace records the file's true sha256."""
    import hashlib

    import rlm.input.source as source_mod
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    expected = sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # this small file as a big one
    if index_ahead:
        monkeypatch.setattr(source_mod, "DEFERRED_INDEX_BYTES", 0)
    count = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
    first = write_script(
        isolated / "first.json",
        [
            {"tool": "execute", "args": {"code": count}},
            {"tool": "final", "args": {"answer": str(expected)}},
            json.dumps({"answer": str(expected), "explanation": "Counted by SQL.", "citations": ["F1"]}),
        ],
    )
    settings = load_settings({"model": first, "retry_base_delay": 0.01})
    assert run_ask(settings, str(log), "Count the 404 responses.").answer == str(expected)
    shutil.rmtree(isolated / ".cache")  # the cache evicted; the memory kept

    progress, first_step_ended_before_the_table = _build_held_until_the_first_step(monkeypatch)
    calls = isolated / "second-calls.jsonl"
    second = write_script(
        isolated / "second.json",
        {
            "log": str(calls),
            "replies": [
                {"tool": "peek", "args": {"start": 1, "length": 2}},
                {"tool": "final", "args": {"answer": str(expected)}},
                json.dumps(
                    {"answer": str(expected), "explanation": "Established earlier.", "citations": ["M1"]}
                ),
            ],
        },
    )
    settings = load_settings({"model": second, "retry_base_delay": 0.01})
    result = run_ask(settings, str(log), "Were there many 404 responses?", progress=progress)
    assert first_step_ended_before_the_table == [True]
    assert result.answer == str(expected)
    prompt = json.loads(calls.read_text().splitlines()[0])["messages"][1]["content"]
    assert "[ESTABLISHED earlier]" in prompt and "[M1]" in prompt
    [trace] = [t for t in traces_in(isolated) if t["question"].startswith("Were")]
    assert trace["memory"]["offered"] == ["M1"] and trace["memory"]["cited"] == ["M1"]
    assert trace["input"]["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert trace["input"]["table_error"] is None


def test_a_digest_is_computed_once_by_whoever_needs_it_first() -> None:
    """The thread after the build and a wait started earlier share one computation; what it
    meets ends the future for every waiter."""
    from concurrent.futures import ThreadPoolExecutor

    from rlm.input.digest import Digest

    calls: list[int] = []
    started, release = threading.Event(), threading.Event()

    def compute() -> str:
        calls.append(1)
        started.set()
        release.wait(5)
        return "abc"

    digest = Digest(compute)
    with ThreadPoolExecutor(4) as pool:
        waits = [pool.submit(digest.result, 10) for _ in range(3)]
        assert started.wait(5)
        digest.compute_once()  # the build's thread: the computation is under way, it returns
        release.set()
        assert [w.result() for w in waits] == ["abc"] * 3
    assert calls == [1] and Digest.known("d").result() == "d"

    def fails() -> str:
        raise OSError(5, "Input/output error")

    broken = Digest(fails)
    with pytest.raises(OSError):
        broken.result(5)


def test_a_first_question_that_never_queries_still_leaves_the_table_cached(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run answered by grep alone ends once its table is built, and the next question finds
    it in the cache instead of building it again."""
    import rlm.input.source as source_mod
    from rlm.input.tables import table_cached
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # this small file as a big one
    model = write_script(
        isolated / "s.json",
        [
            {"tool": "grep", "args": {"pattern": "HEAD"}},
            {"tool": "final", "args": {"answer": "7"}},
            json.dumps({"answer": "7", "explanation": "Counted by grep.", "citations": ["F1"]}),
        ],
    )
    settings = load_settings({"model": model, "retry_base_delay": 0.01})
    assert run_ask(settings, str(log), "How many HEAD requests?").answer == "7"
    [description] = (isolated / ".cache").glob("*.t*.json")
    assert table_cached(str(description).rsplit(".t", 1)[0])


def test_a_log_s_columns_are_named_while_its_table_builds(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first prompt of a log whose table is still building names the columns its format
    gives, the same the built table has; a CSV's are left to its header line, shown below."""
    import rlm.input.source as source_mod

    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # these small files as big ones
    built = threading.Event()
    real_build = source_mod.ensure_table

    def held_build(*args: Any, **kwargs: Any) -> Any:
        assert built.wait(60)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(source_mod, "ensure_table", held_build)
    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    with source_mod.open_source(str(log), cache_dir=str(isolated / "c1"), background_table=True) as src:
        building = src.profile.prompt_block(4000)
        built.set()
        table = src.profile.with_table().table
    assert table is not None
    named = ", ".join(f"{name} {typ}" for name, typ in table["columns"])
    assert f"Its columns, as the format of the first lines gives them: {named} (" in building
    assert "ip VARCHAR" in named and "status INTEGER" in named
    built.clear()
    csv = isolated / "t.csv"
    csv.write_text("when,city,amount\n2024-01-01,Oslo,3\n2024-01-02,Rome,4\n")
    with source_mod.open_source(str(csv), cache_dir=str(isolated / "c2"), background_table=True) as src:
        building = src.profile.prompt_block(4000)
        built.set()
    assert "its columns are named once it is ready" in building and "when,city,amount" in building


def test_a_big_table_s_build_waits_for_the_run_s_start_then_sql_counts_over_it(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event load_litellm_in_background returns reaches the table job: the build does not
    start before it is set (here: once the model's first step has ended), and the second step's
    sql() then counts over the whole table, through the real worker."""
    import rlm.input.source as source_mod
    import rlm.run.wiring as wiring
    from rlm.run.events import Step
    from rlm.run.settings import load_settings

    log = isolated / "access.log"
    log.write_bytes((FIXTURES / "access.log").read_bytes())
    expected = sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # this small file as a big one
    monkeypatch.setattr(wiring, "_OVERLAP_IMPORT_BYTES", 0)
    started = threading.Event()
    monkeypatch.setattr(wiring, "load_litellm_in_background", lambda: started)
    built_after_start: list[bool] = []
    real_build = source_mod.ensure_table

    def watched_build(*args: Any, **kwargs: Any) -> Any:
        built_after_start.append(started.is_set())
        return real_build(*args, **kwargs)

    monkeypatch.setattr(source_mod, "ensure_table", watched_build)

    def progress(event: object) -> None:
        if isinstance(event, Step) and event.step == 1:
            assert built_after_start == []  # the first step ran with no build begun
            started.set()

    count = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
    model = write_script(
        isolated / "s.json",
        [
            {"tool": "execute", "args": {"code": "print(peek(1, 1)[:20])"}},
            {"tool": "execute", "args": {"code": count}},
            {"tool": "final", "args": {"answer": str(expected)}},
            json.dumps({"answer": str(expected), "explanation": "Counted by SQL.", "citations": ["F2"]}),
        ],
    )
    settings = load_settings({"model": model, "retry_base_delay": 0.01})
    result = wiring.run_ask(settings, str(log), "How many requests returned 404?", progress=progress)
    assert built_after_start == [True]
    assert result.answer == str(expected)
    [trace] = traces_in(isolated)
    assert trace["steps"][1]["observation"]["preview"] == f"{expected}\n"
    assert trace["table_build"]["background"] is True


def test_a_table_job_waits_for_its_event_up_to_a_limit_and_stops_while_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job with `after` builds only once the event is set; an event never set holds it no
    longer than the limit; a stop while it waits ends the job at once, nothing built."""
    import time

    import rlm.input.tablejob as tablejob

    began: list[float] = []

    def build() -> tuple[dict[str, Any] | None, str | None]:
        began.append(time.monotonic())
        return {"path": "t.duckdb"}, None

    after = threading.Event()
    job = tablejob.TableJob(build, after=after)
    time.sleep(0.3)
    assert began == [] and not job.done()
    set_at = time.monotonic()
    after.set()
    assert job.result(10) == ({"path": "t.duckdb"}, None)
    assert began[0] >= set_at

    monkeypatch.setattr(tablejob, "_AFTER_WAIT_S", 0.4)
    began.clear()
    t0 = time.monotonic()
    never = tablejob.TableJob(build, after=threading.Event())
    assert never.result(10) == ({"path": "t.duckdb"}, None)
    assert 0.4 <= began[0] - t0 < 5

    began.clear()
    monkeypatch.setattr(tablejob, "_AFTER_WAIT_S", 60.0)
    stopped = tablejob.TableJob(build, after=threading.Event())
    t0 = time.monotonic()
    stopped.stop()
    assert stopped.result(5) == (None, "the run ended before its table was built")
    assert time.monotonic() - t0 < 1.5 and began == []


def test_litellm_s_import_in_the_background_tells_when_it_has_ended() -> None:
    """In a fresh process the event is unset while litellm and the OpenAI SDK's modules load,
    and set once they have: what the model's first request needs is then imported."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rlm.model.client import load_litellm_in_background\n"
        "ended = load_litellm_in_background()\n"
        "print(ended.is_set())\n"
        "assert ended.wait(120)\n"
        "print('litellm' in sys.modules, 'openai.resources.chat' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


@pytest.mark.parametrize("then", ["event", "star", "user", "two"])
def test_a_query_on_a_syslog_s_own_columns_runs_before_its_sshd_columns_are_built(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """A syslog's sshd columns are built after its others: a first query on the others runs on
    the table without them while they are held back; a query naming one of them (the early
    table cannot bind it), or a star, waits for the whole table and reads it."""
    import re

    import rlm.input.source as source_mod
    from rlm.input.tablejob import TableJob
    from rlm.run.engine import Engine
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    log = isolated / "auth.log"
    log.write_bytes((FIXTURES / "auth.log").read_bytes())
    lines = log.read_text().splitlines()
    sshd = sum(1 for line in lines if re.match(r"\S+ +\d+ \S+ \S+ sshd\[", line))
    failed = sum(
        1
        for line in lines
        if re.search(r"sshd\[\d+\]: (?:message repeated \d+ times: \[ )?Failed password for ", line)
    )
    monkeypatch.setattr(source_mod, "BACKGROUND_TABLE_BYTES", 0)  # this small file as a big one
    release, held = threading.Event(), threading.Event()
    asked: list[bool] = []
    real_early, real_for_worker = TableJob._early_built, Engine.table_for_worker

    def early_then_hold(self: TableJob, path: str) -> None:
        real_early(self, path)
        held.set()
        assert release.wait(60), "the sshd columns were never asked for"

    def table_for_worker(self: Engine, whole: bool) -> tuple[str | None, str | None, bool]:
        asked.append(whole)
        if whole:
            release.set()  # the whole table is asked for: its build goes on
        return real_for_worker(self, whole)

    monkeypatch.setattr(TableJob, "_early_built", early_then_hold)
    monkeypatch.setattr(Engine, "table_for_worker", table_for_worker)
    first = "print(sql(\"SELECT count(*) FROM log WHERE program = 'sshd'\")[0][0])"
    # `user` unbound on a table without it would be DuckDB's current_user; two statements, the
    # first run twice if the second had to run again.
    users = len(
        {
            m[1]
            for line in lines
            if (m := re.search(r"sshd\[\d+\]: Invalid user (.*) from \S+(?: port \d+)?$", line))
        }
    )
    second = {
        "event": "print(sql(\"SELECT count(*) FROM log WHERE event = 'failed_password'\")[0][0])",
        "star": 'r = sql("SELECT * FROM log LIMIT 1"); print(len(r.columns), r.columns[-4:])',
        "user": "print(sql(\"SELECT count(DISTINCT user) FROM log WHERE event = 'invalid_user'\")[0][0])",
        "two": (
            'print(sql("CREATE TEMP TABLE seen AS SELECT 1 AS n; INSERT INTO seen SELECT 2; '
            "SELECT count(*), count(event) FROM seen, log WHERE event = 'failed_password'\")[0])"
        ),
    }[then]
    shown = {
        "event": f"{failed}\n",
        "star": "11 ['event', 'user', 'src_ip', 'src_port']\n",
        "user": f"{users}\n",
        "two": f"({2 * failed}, {2 * failed})\n",
    }[then]
    model = write_script(
        isolated / "s.json",
        [
            {"tool": "execute", "args": {"code": first}},
            {"tool": "execute", "args": {"code": second}},
            {"tool": "final", "args": {"answer": str(sshd)}},
            json.dumps({"answer": str(sshd), "explanation": "Counted by SQL.", "citations": ["F1"]}),
        ],
    )
    settings = load_settings({"model": model, "retry_base_delay": 0.01})
    result = run_ask(settings, str(log), "How many sshd lines?")
    assert result.answer == str(sshd)
    [trace] = traces_in(isolated)
    steps = [s["observation"] for s in trace["steps"]]
    # the first query ran on the early table, the sshd columns held back until the second asked
    assert held.is_set() and asked[0] is False and True in asked
    assert steps[0]["ok"] and steps[0]["preview"] == f"{sshd}\n", steps[0]
    assert steps[1]["ok"] and steps[1]["preview"] == shown, steps[1]


@pytest.mark.slow  # an 80 MB syslog, built in the background of the CLI's run
def test_a_syslog_s_queries_through_the_cli_read_what_its_whole_table_holds(tmp_path: Path) -> None:
    """Through the CLI, cold: a count on a syslog's own columns, one on an sshd column, a star and
    the table's description, in one run whose table builds in the background; each reads what
    the whole table holds (Python's own count of the file), and the next question, cached, the same."""
    import re

    log = tmp_path / "sys.log"
    bigfiles.syslog(log, 80 * MB)
    lines = log.read_text().splitlines()
    sshd = sum(1 for line in lines if re.match(r"\S+ +\d+ \S+ \S+ sshd\[", line))
    failed = sum(
        1
        for line in lines
        if re.search(r"sshd\[\d+\]: (?:message repeated \d+ times: \[ )?Failed password for ", line)
    )
    code = (
        "print(sql(\"SELECT count(*) FROM log WHERE program = 'sshd'\")[0][0])\n"
        "print(sql(\"SELECT count(*) FROM log WHERE event = 'failed_password'\")[0][0])\n"
        "print(sql('SELECT * FROM log LIMIT 1').columns[-4:])\n"
        "print([r[0] for r in sql('DESCRIBE log')][-4:])"
    )
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "final", "args": {"answer": str(sshd)}},
            str(sshd),
        ],
    )
    shown = f"{sshd}\n{failed}\n" + "['event', 'user', 'src_ip', 'src_port']\n" * 2
    for _ in range(2):
        proc = run_cli(["ask", str(log), "how many sshd lines?", "-m", model], cwd=tmp_path, timeout=300)
        assert proc.returncode == 0 and proc.stdout == f"{sshd}\n", proc.stderr[-2000:]
        trace = traces_in(tmp_path)[-1]
        assert trace["steps"][0]["observation"]["preview"] == shown, trace["steps"][0]["observation"]
    assert traces_in(tmp_path)[0]["table_build"]["background"] is True
    assert "table_build" not in traces_in(tmp_path)[-1]
