"""A final naming a lower row of the model's own ranking, where the question asks for the most:
refused once, in doubt if sent again after one more query (rlm.run.typed.ranked)."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, ask_typed_cli, latest_trace, run_typed

from rlm.run.typed.ranked import off_top
from rlm.run.typed.steps import asks_in_two_steps, second_step

TAXIS = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "seaborn" / "taxis.csv"
QUESTION = "Which dropoff zone got the most trips among those ending in Brooklyn?"
BROOKLYN = [{"column": "dropoff_borough", "cmp": "=", "value": "Brooklyn"}]


def _ranking() -> list[str]:
    """The dropoff zones of trips ending in Brooklyn as the group query ranks them: most first, ties by name."""
    with TAXIS.open(newline="") as fh:
        counts = Counter(
            r["dropoff_zone"]
            for r in csv.DictReader(fh)
            if r["dropoff_borough"] == "Brooklyn" and r["dropoff_zone"]
        )
    return [zone for zone, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


@pytest.mark.parametrize(
    ("question", "answer", "fits"),
    [
        ("Which zone was the most common?", "Astoria", False),
        ("Which zone was the most common?", "It is Astoria.", False),
        ("Which zone was the most common?", "Park Slope", True),
        ("Which zone was the most common?", "Park Slope, then Astoria", True),  # the first is named
        ("Which zone was the most common? List the top 3.", "Astoria", True),  # several asked
        ("Which zone had a ride at 3am?", "Astoria", True),  # no most asked
        # "each" where it tells what the data is asks for nothing; where it asks, it asks for several
        ("The zone of each ride is its fourth field. Which zone turns up most?", "Astoria", False),
        ("Which zone turns up most on each day?", "Astoria", True),
    ],
)
def test_a_lower_row_misfits_where_the_one_most_is_asked(question: str, answer: str, fits: bool) -> None:
    keys = ["Park Slope", "Williamsburg (North Side)", "Astoria", "Boerum Hill"]
    assert (off_top(question, answer, keys) is None) is fits


def test_a_final_naming_a_lower_row_is_refused_once_then_taken_in_doubt(tmp_path: Path) -> None:
    ranking = _ranking()
    lower = ranking[2]
    group = json.dumps({"op": "group", "by": "dropoff_zone", "k": 20, "where": BROOKLYN})
    wrong = json.dumps({"op": "final", "answer": f"The busiest dropoff zone is {lower}."})
    replies = [group, wrong, json.dumps({"op": "top", "column": "dropoff_zone", "k": 1, "where": BROOKLYN})]
    # Told, the model answers with the first row: the answer stands.
    right = [*replies, json.dumps({"op": "final", "answer": ranking[0]}), json.dumps({"answer": ranking[0]})]
    proc, stub = ask_typed_cli(TAXIS, QUESTION, right, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{ranking[0]}\n", proc.stderr
    told = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: the question asks for the most, and your answer is not the first row" in told
    assert lower not in told.rsplit("final refused", 1)[1]  # the model's answer is not quoted back
    assert f"The first row is {ranking[0]!r}." in told  # named, to be copied
    # Sent again after one more query, it is taken, in doubt: --strict withholds it.
    again = [*replies, wrong, json.dumps({"answer": lower})]
    proc, _ = ask_typed_cli(TAXIS, QUESTION, again, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    doubts = latest_trace(tmp_path)["synthesis"]["doubts"]
    row = ranking.index(lower) + 1
    assert doubts == [
        f"kind: the answer names row {row} of a ranking, most first, where the question asks for the most"
    ]


@pytest.mark.parametrize(
    "question, two",
    [
        ("Look up the busiest path among 404 replies. Which address asked for it most often?", True),
        ("Find the host that logged the most warnings. What program wrote most of them?", True),
        ("There was only one reboot here. Which host went through it?", True),
        ("Identify the slowest job; how long did it take? Seconds.", False),  # one sentence
        ("Find the busiest worker. Then tell me how many jobs it dropped.", True),  # "then tell me how"
        ("Hosts log disk warnings. Which host logged them most often?", False),  # context, not a step
        ("Find the quietest minute. Reply in the form 10:05.", False),  # no question about what was found
    ],
)
def test_a_question_in_two_steps_is_read_by_its_form(question: str, two: bool) -> None:
    assert asks_in_two_steps(question) is two


def _write_misses(path: Path) -> None:
    """An access log in which one page is the most missed (404) and, of those who missed it, one
    address missed it most; other pages and addresses around it."""
    asked = [("/old/a.html", "10.9.0.7", 404)] * 4 + [("/old/a.html", "10.9.0.8", 404)] * 2
    asked += [("/old/b.html", "10.9.0.8", 404)] * 3 + [("/index.html", f"10.9.1.{i}", 200) for i in range(30)]
    lines = [
        f'{ip} - - [17/May/2015:10:{i // 60:02d}:{i % 60:02d} +0000] "GET {page} HTTP/1.1" {status} 512 "-" "curl/7.1"'
        for i, (page, ip, status) in enumerate(asked)
    ]
    path.write_text("\n".join(lines) + "\n")


def test_a_final_after_the_first_of_two_steps_is_refused_once_then_in_doubt(tmp_path: Path) -> None:
    """Through the CLI and the real worker: asked to find a page and then who missed it most, a
    final after the ranking that found the page is refused once; a final after a query of that
    page's rows is taken; one sent again after a query of the same step is in doubt."""
    log = tmp_path / "access.log"
    _write_misses(log)
    page, address = "/old/a.html", "10.9.0.7"
    question = "Look up the page that was missed most. Which address asked for it most often?"
    find = {"op": "top", "column": "path", "k": 5, "where": [{"column": "status", "cmp": "=", "value": 404}]}
    then = {
        "op": "top",
        "column": "ip",
        "k": 5,
        "where": [
            {"column": "path", "cmp": "=", "value": page},
            {"column": "status", "cmp": "=", "value": 404},
        ],
    }

    def replies(second: dict, answer: str) -> list[str]:
        final = json.dumps({"op": "final", "answer": answer})
        return [json.dumps(find), json.dumps({"op": "final", "answer": page}), json.dumps(second), final,
                json.dumps({"answer": answer, "citations": ["F1"]})]  # fmt: skip

    proc, stub = ask_typed_cli(log, question, replies(then, address), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{address}\n", proc.stderr
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: the question asks in two steps" in refused
    # The refusal names the filter on the value the ranking found first, to be written as it is.
    filtered = json.dumps({"column": "path", "cmp": "=", "value": page})
    assert f'add {filtered} to the "where" of that query' in refused, refused[-600:]
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == []

    again = {**find, "k": 3}  # the first step again: still one step's answer
    proc, stub = ask_typed_cli(log, question, replies(again, page), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "the question asks in two steps" in proc.stderr


def test_a_second_step_filters_on_a_found_value_or_lists_whole_rows() -> None:
    found = {"/old/a.html", "10.9.0.7"}
    on_found = {
        "op": "top",
        "column": "ip",
        "where": [{"column": "path", "cmp": "=", "value": "/old/a.html"}],
    }
    assert second_step(json.dumps(on_found), found)
    rows = {"op": "rows", "columns": ["path", "ip"], "order_by": "bytes", "take": "last", "k": 1}
    assert second_step(json.dumps(rows), set())  # the row found and what it holds, at once
    elsewhere = {"op": "top", "column": "ip", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    assert not second_step(json.dumps(elsewhere), found) and not second_step("not json", found)


def test_the_filter_on_the_value_a_ranking_found_first(tmp_path: Path) -> None:
    from rlm.input.source import open_source
    from rlm.run.typed.steps import found_filter

    table = open_source(str(FIXTURES / "access.log"), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    top = json.dumps({"op": "top", "column": "status", "k": 3})
    assert found_filter(top, ["404", "200"], table) == {"column": "status", "cmp": "=", "value": 404}
    group = json.dumps({"op": "group", "by": "ip", "k": 3})
    assert found_filter(group, ["10.0.0.7"], table) == {"column": "ip", "cmp": "=", "value": "10.0.0.7"}
    # Not a ranking, a value read after a text, nothing printed: no filter to name.
    assert found_filter(json.dumps({"op": "count"}), ["12"], table) is None
    after = json.dumps({"op": "top", "column": "line", "after": "GET ", "k": 3})
    assert found_filter(after, ["/a.html"], table) is None
    assert found_filter(top, [], table) is None
    # The busiest day: `=` on the time column is that whole day; an hour's key is where it starts.
    days = json.dumps({"op": "group", "by": "ts", "bucket": "day", "k": 3})
    busiest = found_filter(days, ["2015-05-19", "2015-05-18"], table)
    assert busiest == {"column": "ts", "cmp": "=", "value": "2015-05-19"}
    per_day = Counter(m for m in re.findall(r"\[(\d\d)/May/2015", (FIXTURES / "access.log").read_text()))
    assert run_typed({"op": "count", "where": [busiest]}, table)[1] == [(per_day["19"],)]
    hours = json.dumps({"op": "group", "by": "ts", "bucket": "hour", "k": 3})
    assert found_filter(hours, ["2015-05-19 10:00"], table) is None


def test_a_final_naming_a_lower_period_of_a_group_per_day_is_refused_with_the_first(tmp_path: Path) -> None:
    """A group per day, the busiest first, is a ranking as a group of a column's values is: a
    final naming its second day is refused once, the first day named; and the filter named on it
    is that whole day."""
    from datetime import datetime

    from rlm.input.source import open_source
    from rlm.run.typed.steps import found_filter

    access = FIXTURES / "access.log"
    days = Counter(
        datetime.strptime(line.split("[", 1)[1][:11], "%d/%b/%Y").strftime("%Y-%m-%d")
        for line in access.open()
    )
    ranked = [day for day, _ in sorted(days.items(), key=lambda dn: (-dn[1], dn[0]))]
    group = json.dumps({"op": "group", "by": "ts", "bucket": "day", "k": 5})
    replies = [
        group,
        json.dumps({"op": "final", "answer": ranked[1]}),
        json.dumps({"op": "final", "answer": ranked[0]}),
        json.dumps({"answer": ranked[0], "citations": ["F1"]}),
    ]
    question = "Name the date with the most traffic, as YYYY-MM-DD."
    proc, stub = ask_typed_cli(access, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{ranked[0]}\n", proc.stderr
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: the question asks for the most" in refused and f"'{ranked[0]}'" in refused, (
        refused[-500:]
    )
    table = open_source(str(access), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    assert found_filter(group, ranked, table) == {"column": "ts", "cmp": "=", "value": ranked[0]}


def test_the_cli_refuses_once_the_value_beside_a_lower_row_of_the_largest(tmp_path: Path) -> None:
    """Rows listed largest first (rlm's rows of the largest total, with the zone asked): a final
    naming the second row's zone is refused once, and the first row's taken."""
    taxis = FIXTURES / "data" / "seaborn" / "taxis.csv"
    with taxis.open(newline="") as fh:
        rides = sorted(csv.DictReader(fh), key=lambda r: -float(r["total"]))
    first, second = rides[0]["pickup_zone"], rides[1]["pickup_zone"]
    assert first and second and first != second and float(rides[0]["total"]) > float(rides[1]["total"])
    replies = [
        json.dumps({"op": "top", "column": "pickup_zone"}),
        json.dumps({"op": "final", "answer": second}),
        json.dumps({"op": "final", "answer": first}),
        json.dumps({"answer": first, "citations": ["F1"]}),
    ]
    question = "Which pickup zone had the ride with the highest total? Zone only."
    proc, stub = ask_typed_cli(taxis, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{first}\n", proc.stderr
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "your answer is not the first row" in refused and first in refused


def test_a_ranking_sent_again_after_a_refused_final_keeps_the_conditions_rlm_added(tmp_path: Path) -> None:
    """Through the CLI and the real worker: rlm adds the borough the question names to a ranking,
    the model answers a lower row and is refused; it sends its ranking again, which is the
    ranking rlm ran, with the borough (a ranking of every trip's zone is no answer): shown again
    as a repeat, its first row is taken."""
    ranking = _ranking()
    group = json.dumps({"op": "group", "by": "dropoff_zone", "k": 20})  # no borough: rlm adds it
    replies = [
        group,
        json.dumps({"op": "final", "answer": ranking[2]}),
        group,
        json.dumps({"op": "final", "answer": ranking[0]}),
        json.dumps({"answer": ranking[0]}),
    ]
    proc, stub = ask_typed_cli(TAXIS, QUESTION, replies, cwd=tmp_path)
    assert (
        "final refused: the question asks for the most" in stub.requests[2]["body"]["messages"][-1]["content"]
    )
    again = stub.requests[3]["body"]["messages"][-1]["content"]
    assert "not run: you already ran exactly this at step 1" in again and ranking[0] in again, again[-900:]
    assert "dropoff_borough" in latest_trace(tmp_path)["steps"][2]["action"]["args"]["code"]  # rlm's query
    assert proc.returncode == 0 and proc.stdout == f"{ranking[0]}\n", proc.stderr


def test_a_list_left_short_sent_again_after_its_query_is_repeated_is_in_doubt(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a list that leaves out a value its ranking shows is
    refused once; the model sends the same ranking (not run: a repeat) and the same list. The
    repeat shows what the ranking showed, so the list is checked against it: in doubt, withheld."""
    events = tmp_path / "events.csv"
    rows = ["retry"] * 40 + ["finished"] * 30 + ["aborted"] * 2
    events.write_text("n,event\n" + "".join(f"{i},{e}\n" for i, e in enumerate(rows)))
    question = "List every kind of event other than retry that the file writes."
    ranking = json.dumps({"op": "top", "column": "event", "k": 5})
    short = json.dumps({"op": "final", "answer": "finished"})
    replies = [ranking, short, ranking, short, json.dumps({"answer": "finished"})]
    proc, stub = ask_typed_cli(events, question, replies, cwd=tmp_path)
    assert (
        "your answer leaves out values your ranking shows"
        in stub.requests[2]["body"]["messages"][-1]["content"]
    )
    assert "not run: you already ran exactly this" in stub.requests[3]["body"]["messages"][-1]["content"]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == [
        "kind: the answer lists 1 of the 2 values its ranking shows"
    ]


def test_a_final_naming_a_lower_row_of_a_ranking_fewest_first_is_refused_with_the_first(
    tmp_path: Path,
) -> None:
    """Through the CLI and the real worker: the fewest asked, the ranking runs fewest first
    (rlm.run.typed.measure), and a final naming its second row is refused once, the first row
    named; sent again after the ranking again (a repeat), it is in doubt and withheld."""
    rides = tmp_path / "rides.csv"
    counts = {"Dock": 5, "Mill": 3, "Pier": 7, "Quay": 1, "Weir": 9}
    rows = [zone for zone, n in counts.items() for _ in range(n)]
    rides.write_text("ride,zone\n" + "".join(f"{i},{z}\n" for i, z in enumerate(rows)))
    question = "Which zone has the fewest rides?"
    group = json.dumps({"op": "group", "by": "zone", "k": 10})

    def final(answer: str) -> str:
        return json.dumps({"op": "final", "answer": answer})

    replies = [group, final("Mill"), group, final("Quay"), json.dumps({"answer": "Quay"})]
    proc, stub = ask_typed_cli(rides, question, replies, cwd=tmp_path)
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert (
        "final refused: the question asks for the fewest" in refused and "The first row is 'Quay'." in refused
    )
    assert proc.returncode == 0 and proc.stdout == "Quay\n", proc.stderr
    again = [group, final("Mill"), group, final("Mill"), json.dumps({"answer": "Mill"})]
    proc, _ = ask_typed_cli(rides, question, again, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "row 2 of a ranking, fewest first, where the question asks for the fewest" in proc.stderr
