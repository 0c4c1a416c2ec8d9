"""Reading the tables a check is given: a DataFrame or a list of records, its columns, the rows an exercise
asks about, and the values a student answers with.

    df = where(frame(records), {"concurrency": 16});  col(df, "queue_delay_us", "max_queue_delay_us")
    number(answer, "the speed-up");  close(x, expected, rel=0.02);  norm("JPEG") == "jpeg"

Every helper refuses bad input with a message that says what to fix: a ValueError for a table the notebook
passed wrongly, `reject` (a failed check with a hint) for an answer the student wrote wrongly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from servelab.assignments.result import reject
from servelab.errors import InvalidValue


def frame(table) -> pd.DataFrame:
    """A copy of `table` (DataFrame or records) as a DataFrame; an empty table is the notebook's mistake."""
    df = table.copy() if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    if df.empty:
        raise InvalidValue("the check got an empty table: run the measuring cells above first")
    return df


def col(df: pd.DataFrame, *names: str) -> str:
    """The first of `names` that is a column of `df` (notebooks and records spell some columns differently)."""
    for n in names:
        if n and n in df.columns:
            return n
    raise InvalidValue(f"the table has none of the columns {', '.join(n for n in names if n)} "
                       f"(it has: {', '.join(map(str, df.columns))})")


def where(df: pd.DataFrame, at: Mapping | None) -> pd.DataFrame:
    """The rows whose columns equal every value of `at` (e.g. {"concurrency": 16}); none is an error."""
    for k, v in (at or {}).items():
        df = df[df[k] == v]
    if df.empty:
        raise InvalidValue(f"no rows of the table match {dict(at)}")
    return df


def at_words(at: Mapping | None) -> str:
    """' at provider=cpu, batch=4' for messages."""
    return (" at " + ", ".join(f"{k}={v}" for k, v in at.items())) if at else ""


def row_figures(rows: pd.DataFrame) -> list[dict]:
    """The rows as records, without their missing cells: a table that joins records with and without a field
    (per-window lists, say) fills the gaps with NaN, and a record reads a missing field as absent."""
    def missing(v) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    return [{k: v for k, v in row.items() if not missing(v)} for row in rows.to_dict("records")]


def number(value, what: str) -> float:
    """The student's answer as a float, or a hint naming what is wrong with it (a bool, None, text, NaN)."""
    if isinstance(value, bool) or value is None:
        reject(f"{what} should be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        reject(f"{what} should be a number, got {type(value).__name__} {value!r}")
    if math.isnan(x):
        reject(f"{what} is NaN: check for empty selections or divisions by zero")
    return x


def close(a: float, b: float, rel: float, abs_: float = 0.0) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def norm(v) -> str:
    """How names in a table and in an answer are compared: "JPEG " and "jpeg" name the same payload."""
    return str(v).strip().lower()
