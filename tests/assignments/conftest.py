"""Run the check of the last lab run's instructor notebooks after everything else in the session, so that in a
full `pytest` it grades the smoke lab run tests/notebooks has just made (it sorts after tests/assignments)."""

from __future__ import annotations

LAST = "test_instructor_notebooks_passed_in_the_last_lab_run"


def pytest_collection_modifyitems(session, config, items):
    last = [i for i in items if i.name == LAST]
    if last:
        items[:] = [i for i in items if i.name != LAST] + last
