"""Assignment mode: exercise cells with self-checks (students), solution notebooks (instructors), grading.

An exercise is a code cell tagged `exercise` in a notebook's jupytext `.py` source:

    # %% tags=["exercise"]
    # Exercise 04.1: choose max_queue_delay_microseconds for the latency budget
    def choose_queue_delay(grid, budget_ms):
        # BEGIN SOLUTION
        ...
        # END SOLUTION

followed by a check cell that calls a `servelab.assignments.checks` function with the answer (a value or
the student's function), this run's own table, and `exercise="04.1"`. The check prints PASS or FAIL with a
hint (never the answer), records the result in the notebook's output (and under the run's folder), and
raises only when asked to (`strict=True` or SERVELAB_CHECKS_STRICT=1); an unimplemented exercise
(NotImplementedError) is a clean FAIL, so a student notebook executed by papermill runs to its end.

`servelab lab assignments` writes student/instructor notebooks (servelab.assignments.generate);
`servelab lab grade` reads executed notebooks into a CSV (servelab.assignments.grade).
"""

from servelab.assignments.result import MIME_TYPE, CheckResult, ExerciseFailed

__all__ = ["CheckResult", "ExerciseFailed", "MIME_TYPE"]
