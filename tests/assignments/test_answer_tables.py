"""The table helpers every check reads its data with: a notebook's mistake (an empty table, a missing column,
a selection that matches nothing) is an error that says what to fix; a student's answer that is not a number
fails with a hint; missing cells of a joined table read as absent fields."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from servelab.assignments.checks.answer_tables import at_words, col, frame, norm, number, row_figures, where
from servelab.assignments.result import FAIL, PASS, run_check


def test_frame_takes_records_or_a_frame_and_refuses_an_empty_table():
    records = [{"server": "fastapi", "throughput_img_s": 20.0}]
    assert frame(records).equals(frame(pd.DataFrame(records)))
    with pytest.raises(ValueError, match="run the measuring cells above first"):
        frame([])


def test_col_names_the_columns_it_looked_for_and_the_ones_there():
    df = pd.DataFrame({"max_queue_delay_us": [0], "concurrency": [1]})
    assert col(df, "queue_delay_us", "max_queue_delay_us") == "max_queue_delay_us"
    with pytest.raises(ValueError, match=r"none of the columns delay_us \(it has: max_queue_delay_us, concurrency\)"):
        col(df, "delay_us")


def test_where_selects_rows_and_says_when_none_match():
    df = pd.DataFrame({"batch": [1, 8, 8], "concurrency": [1, 1, 4]})
    assert len(where(df, {"batch": 8})) == 2 and len(where(df, None)) == 3
    with pytest.raises(ValueError, match="no rows of the table match"):
        where(df, {"batch": 8, "concurrency": 16})
    assert at_words({"batch": 8, "concurrency": 4}) == " at batch=8, concurrency=4" and at_words(None) == ""


@pytest.mark.parametrize("value, hint", [
    (True, "should be a number, got True"),
    (None, "should be a number, got None"),
    ("fast", "should be a number, got str 'fast'"),
    (math.nan, "is NaN"),
])
def test_an_answer_that_is_not_a_number_fails_with_a_hint(value, hint):
    r = run_check("t", "t", value, (), lambda v: f"{number(v, 'the speed-up'):g}", None, False)
    assert r.status == FAIL and hint in r.message, r.message
    assert run_check("t", "t", "1.25", (), lambda v: f"{number(v, 'the speed-up'):g}", None, False).status == PASS


def test_names_compare_without_case_or_spaces():
    assert norm(" JPEG ") == norm("jpeg") == "jpeg" and norm(16) == "16"


def test_row_figures_drop_the_cells_a_joined_table_left_empty():
    df = pd.DataFrame([{"server": "a", "throughput_img_s": 20.0, "window_throughput_img_s": [19.0, 21.0]},
                       {"server": "b", "throughput_img_s": 18.0, "stable": True}])
    a, b = row_figures(df)
    assert a == {"server": "a", "throughput_img_s": 20.0, "window_throughput_img_s": [19.0, 21.0]}
    assert b == {"server": "b", "throughput_img_s": 18.0, "stable": True}
