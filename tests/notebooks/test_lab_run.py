"""The lab end to end: every notebook executed by papermill with smoke parameters against a real loopback
stack, each wrote its tables, and the report lists every notebook."""

from __future__ import annotations

import csv

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks

NOTEBOOKS = [p.stem for p in nbs.discover()]


def test_the_lab_has_every_step():
    ids = [nbs.notebook_id(p) for p in nbs.discover()]
    assert ids == ["00", "01", "02", "03", "04", "05a", "05b", "06a", "06b", "06c", "07", "08", "09"]


def test_every_notebook_ran_ok(smoke_run):
    status = {e["name"]: e for e in smoke_run["state"]["notebooks"]}
    assert sorted(status) == sorted(NOTEBOOKS)
    bad = {n: e.get("error") for n, e in status.items() if e["status"] != "ok"}
    assert not bad, bad
    for name in NOTEBOOKS:
        assert (smoke_run["dir"] / "notebooks" / f"{name}.ipynb").is_file()


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_notebook_wrote_tables_and_its_finding(smoke_run, name):
    nb_id = name.split("_", 1)[0]
    tables = smoke_run["dir"] / "tables"
    csvs = sorted(tables.glob(f"{nb_id}_*.csv"))
    assert csvs, f"{name} wrote no table"
    for path in csvs:
        assert path.with_suffix(".md").is_file(), f"{path.name} has no Markdown twin"
        with path.open() as fh:
            rows = list(csv.DictReader(fh))
        assert rows, f"{path.name} is empty"
        assert {"hardware", "versions"} <= set(rows[0]), f"{path.name} rows are not tagged with hardware/versions"
        assert all(r["hardware"] and r["versions"] for r in rows)
    shows = tables / f"{nb_id}_shows.txt"
    assert shows.is_file() and any(ch.isdigit() for ch in shows.read_text()), f"{name}: no 'what this run shows' with numbers"


def test_seed_tables_regenerated(smoke_run):
    tables = {p.stem for p in (smoke_run["dir"] / "tables").glob("*.csv")}
    seeds = {"05a_serialisation", "04_by_batch", "04_by_concurrency", "05a_op_profile", "05a_queue_delay_grid",
             "06a_three_way", "06a_breakdown", "06b_scaling", "07_by_batch", "07_by_concurrency"}
    assert seeds <= tables, sorted(seeds - tables)


def test_report_lists_every_notebook_and_table(smoke_run):
    report = (smoke_run["dir"] / "report.md").read_text()
    for name in NOTEBOOKS:
        assert f"| {name} | ok |" in report
    for table in (smoke_run["dir"] / "tables").glob("*.md"):
        assert f"#### {table.stem}" in report
    assert "## Environment" in report and "cpu_model" in report
    html = (smoke_run["dir"] / "report.html").read_text()
    assert "<table>" in html and "09_capstone_duplicates" in html


def test_records_written_with_fingerprint(smoke_run):
    assert (smoke_run["dir"] / "records.jsonl").stat().st_size > 0
    assert (smoke_run["dir"] / "environment.json").is_file()


def test_progress_is_visible(smoke_run):
    err = smoke_run["proc"].stderr
    for i, name in enumerate(NOTEBOOKS, 1):
        assert f"[{i}/{len(NOTEBOOKS)}] {name} ok" in err


def test_executed_notebooks_state_nothing_about_this_machine(smoke_run):
    """The prose rule (servelab.lab.prose) over what the smoke run executed: no markdown cell states a figure or a
    direction about this machine that the run did not compute."""
    from servelab.lab.prose import notebook_claims

    executed = sorted((smoke_run["dir"] / "notebooks").glob("*.ipynb"))
    assert executed, "the smoke run kept no executed notebook"
    found = {p.stem: [str(c) for c in notebook_claims(p)] for p in executed}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
