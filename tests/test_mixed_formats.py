"""Files of different formats read as one: each part keeps its own fields. An access log, syslog
with CRLF line ends, JSON lines and a Log4j-style log make one `log` whose rows are, part by
part, exactly what the part's own table holds when it is read alone; a CSV among them is kept
as lines and said; through the CLI one sql() counts across formats what grep counts in each."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest import latest_trace, run_cli, write_script

from rlm.input.parts import open_inputs
from rlm.input.source import open_source


@pytest.fixture
def mixed(tmp_path: Path, real_data: Path) -> list[Path]:
    d = tmp_path / "logs"
    d.mkdir()
    web = d / "web.log"
    web.write_bytes(
        b"".join((real_data / "elastic" / "apache_logs").read_bytes().splitlines(keepends=True)[:3000])
    )
    auth = d / "auth.log"  # CRLF line ends: a stray '\r' must not shift the parts after it
    auth.write_bytes(
        b"\r\n".join((real_data / "loghub" / "OpenSSH_2k.log").read_bytes().splitlines()) + b"\r\n"
    )
    status = d / "status.jsonl"
    status.write_bytes(
        b"".join((real_data / "elastic" / "nginxplus_json_logs").read_bytes().splitlines(keepends=True)[:300])
    )
    hadoop = d / "hadoop.log"
    hadoop.write_bytes((real_data / "loghub" / "Hadoop_2k.log").read_bytes())
    return [web, auth, status, hadoop]


def _rows(db: str, columns: list[str], where: str = "") -> list[tuple]:
    con = duckdb.connect(db, read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    try:
        # A time without a zone joins one with a zone as that time in UTC (the table's session).
        cols = ", ".join(
            f"CAST({c}::TIMESTAMP AS VARCHAR)" if c == "ts" else f"CAST({c} AS VARCHAR)" for c in columns
        )
        return con.execute(f"SELECT {cols} FROM log {where} ORDER BY line_no").fetchall()
    finally:
        con.close()


def test_each_part_is_parsed_by_its_own_format(tmp_path: Path, mixed: list[Path]) -> None:
    checked = {
        "web.log": ["line", "ip", "ts", "method", "path", "status", "bytes", "agent"],
        "auth.log": ["line", "ts", "host", "program", "pid", "message", "event", "user", "src_ip"],
        "status.jsonl": ["line", "address", "timestamp", "pid"],
        "hadoop.log": ["line", "ts", "level", "component", "thread", "message"],
    }
    with open_inputs([str(p) for p in mixed], cache_dir=str(tmp_path / "c")) as whole:
        table = whole.profile.table
        assert table is not None
        assert table["format"] == "mixed: apache-combined, syslog, jsonl, log4j-hadoop"
        assert "each parsed by its own" in table["note"]
        assert table["rows"] == whole.profile.lines == 3000 + 2000 + 300 + 2000
        for part in whole.profile.parts or []:
            name = Path(part["name"]).name
            with open_source(part["name"], cache_dir=str(tmp_path / "c")) as alone:
                assert alone.profile.table_path is not None
                own = _rows(alone.profile.table_path, checked[name])
            assert whole.profile.table_path is not None
            got = _rows(
                whole.profile.table_path,
                checked[name],
                f"WHERE line_no BETWEEN {part['first_line']} AND {part['last_line']}",
            )
            assert got == own, name
            assert sum(1 for r in got if r[1] is not None) > 0.9 * len(got), name  # parsed, not NULL


def test_a_csv_among_other_formats_is_kept_as_lines_and_said(
    tmp_path: Path, mixed: list[Path], real_data: Path
) -> None:
    taxis = tmp_path / "logs" / "taxis.csv"
    taxis.write_bytes(
        b"".join((real_data / "seaborn" / "taxis.csv").read_bytes().splitlines(keepends=True)[:50])
    )
    with open_inputs([str(mixed[0]), str(taxis)], cache_dir=str(tmp_path / "c")) as src:
        table = src.profile.table
        assert table is not None and "a CSV among other formats is stored as lines" in table["note"]
        assert table["rows"] == 3050 and table["parsed"] == 3000


def test_one_query_counts_across_formats_through_the_cli(tmp_path: Path, mixed: list[Path]) -> None:
    code = (
        "print(sql(\"SELECT count(*) FILTER (WHERE status = 404), count(*) FILTER (WHERE event = 'failed_password'), "
        "count(*) FILTER (WHERE level = 'WARN'), count(DISTINCT address), count(DISTINCT file) FROM log\")[0])"
    )
    script = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "final", "args": {"answer": "counted"}},
            json.dumps({"answer": "counted", "citations": ["F1"]}),
        ],
    )
    proc = run_cli(["ask", *map(str, mixed), "q?", "-m", script], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    web, auth, status, hadoop = (p.read_text() for p in mixed)
    expected = (
        sum(1 for line in web.splitlines() if line.split()[8] == "404"),
        sum(
            1 for line in auth.splitlines() if "Failed password for " in line
        ),  # also "message repeated N times: [ Failed …"
        sum(1 for line in hadoop.splitlines() if line.split()[2] == "WARN"),
        len({json.loads(line)["address"] for line in status.splitlines()}),
        4,
    )
    assert latest_trace(tmp_path)["steps"][0]["observation"]["preview"].strip() == str(expected)


def test_a_json_part_with_too_many_keys_is_capped_and_said(tmp_path: Path, mixed: list[Path]) -> None:
    wide = tmp_path / "logs" / "wide.jsonl"
    wide.write_text("".join(json.dumps({f"k{i}": i for i in range(300)}) + "\n" for _ in range(20)))
    with open_inputs([str(mixed[0]), str(wide)], cache_dir=str(tmp_path / "c")) as src:
        table = src.profile.table
        assert table is not None and "have 300 keys, the first 200 as columns" in table["note"]
        names = [c[0] for c in table["columns"]]
        assert "k199" in names and "k200" not in names
