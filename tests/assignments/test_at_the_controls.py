"""Lesson 04's exercises where the student drives Triton: the config of their copy of the encoder edited on disk
(read back through Triton's ModelConfig), its load request (checked against the real tritonserver's loaded config),
the perf_analyzer on/off sweep lines (their rules, then run against the real server) and /stats read by hand
(compared with servelab's own reading over the same interval). Each: a right answer passes, a wrong one fails with
a hint, the student version reports `not implemented`."""

from __future__ import annotations

import shutil

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from servelab.assignments import checks
from servelab.assignments.result import FAIL, NOT_IMPLEMENTED, NOT_RUN, PASS, STRICT_ENV
from servelab.lab import triton_by_hand as by_hand
from servelab.lab.config_text import as_json
from servelab.triton.control import model_states, unload_model
from servelab.triton.models import CPU_ENCODER
from servelab.triton.repository import STAGING

ENCODER_CONFIG = STAGING / "cpu" / CPU_ENCODER / "config.pbtxt"
MINE = f"{CPU_ENCODER}_mine"


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


def drop_batching(path):
    text = path.read_text()
    start = text.index("\ndynamic_batching") + 1
    path.write_text(text[:start] + text[text.index("\n}", start) + 3:])


def student(*_):
    raise NotImplementedError("exercise 04.x: …")


# --- config.pbtxt edited on disk (no server needed: the check reads the file) -----------------------------------


@pytest.fixture
def copied(tmp_path):
    repo = tmp_path / "models"
    (repo / CPU_ENCODER / "1").mkdir(parents=True)
    shutil.copy(ENCODER_CONFIG, repo / CPU_ENCODER / "config.pbtxt")
    (repo / CPU_ENCODER / "1" / "model.py").write_text("# stands in for the encoder's model.py\n")
    mine = by_hand.copy_model(repo, CPU_ENCODER, MINE)
    assert (mine / "1" / "model.py").stat().st_ino == (repo / CPU_ENCODER / "1" / "model.py").stat().st_ino
    assert f'name: "{MINE}"' in (mine / "config.pbtxt").read_text()
    return repo


def on_disk(answer, repo, **kw):
    return checks.config_on_disk(answer, path=repo / MINE / "config.pbtxt", original=repo / CPU_ENCODER / "config.pbtxt",
                                 model=MINE, exercise="t.disk", **kw)


def test_config_on_disk_passes_the_file_without_its_stanza_and_leaves_the_encoders_alone(copied):
    r = on_disk(drop_batching, copied)
    assert r.status == PASS, r.message
    assert "dynamic_batching" in (copied / CPU_ENCODER / "config.pbtxt").read_text()  # its own file, not a hard link


@pytest.mark.parametrize("edit, hint", [
    (lambda p: None, "still has a dynamic_batching stanza"),
    (lambda p: (drop_batching(p), p.write_text(p.read_text().replace(f'"{MINE}"', '"other"'))), 'its name: is "other"'),
    (lambda p: (drop_batching(p), p.write_text(p.read_text().replace("max_batch_size: 32", "max_batch_size: 8"))),
     "more than dynamic_batching changed (max_batch_size)"),
    (lambda p: p.write_text(p.read_text().replace("dynamic_batching {", "dynamic_batching {{")), "Triton would not load"),
])
def test_config_on_disk_names_what_a_wrong_edit_breaks(copied, edit, hint):
    r = on_disk(edit, copied)
    assert r.status == FAIL and hint in r.message, r.message


def test_config_on_disk_student_version_and_a_server_elsewhere(copied):
    assert on_disk(student, copied).status == NOT_IMPLEMENTED
    r = on_disk(drop_batching, copied, not_here="its folder is on the node")
    assert r.status == NOT_RUN and "on the node" in r.message


# --- against a real tritonserver -----------------------------------------------------------------------------


@pytest.fixture
def triton(assignments_triton):
    return assignments_triton


@pytest.fixture
def mine(triton):
    """The student's copy in the server's own repository, batching off on disk; unloaded and removed after."""
    path = by_hand.copy_model(triton.repository, CPU_ENCODER, MINE)
    drop_batching(path / "config.pbtxt")
    yield path
    if model_states(triton.http_url).get(MINE, "").startswith("READY"):
        unload_model(triton.http_url, MINE)
    shutil.rmtree(path, ignore_errors=True)


def loaded(answer, triton, mine, **kw):
    return checks.loaded_from_disk(answer, http_url=triton.http_url, model=MINE, path=mine / "config.pbtxt",
                                   exercise="t.load", **kw)


@pytest.mark.triton
def test_loaded_from_disk_passes_the_students_own_load_and_fails_one_with_a_config_of_its_own(triton, mine):
    def load(address, model):
        httpclient.InferenceServerClient(address).load_model(model, headers=triton.headers)

    r = loaded(load, triton, mine)
    assert r.status == PASS, r.message
    override = as_json(ENCODER_CONFIG.read_text().replace(f'"{CPU_ENCODER}"', f'"{MINE}"'))  # batching on again

    def load_with_config(address, model):
        httpclient.InferenceServerClient(address).load_model(model, config=override, headers=triton.headers)

    r = loaded(load_with_config, triton, mine)
    assert r.status == FAIL and "load without a config of your own" in r.message, r.message


@pytest.mark.triton
def test_loaded_from_disk_fails_when_nothing_was_loaded_and_reports_the_student_version(triton, mine):
    httpclient.InferenceServerClient(triton.http_address).load_model(MINE, headers=triton.headers)
    r = loaded(lambda address, model: None, triton, mine)  # the check unloaded it first: only the answer may load it
    assert r.status == FAIL and f"no {MINE} ready" in r.message, r.message
    assert loaded(student, triton, mine).status == NOT_IMPLEMENTED
    assert loaded(None, triton, mine, not_here="elsewhere").status == NOT_RUN


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)


def stats(answer, triton, pixels, swept):
    def sweep():  # a batch-2 request among batch-1 ones: more images than executions, whatever the batcher does
        swept.append(1)
        by_hand.send(triton.http_address, CPU_ENCODER, np.concatenate([pixels, pixels]), clients=1, per_client=1)
        by_hand.send(triton.http_address, CPU_ENCODER, pixels, clients=2, per_client=2)

    # The counters' ratio since the start must differ from anything the sweep can read (6 inferences in 2 to 5
    # executions): batches of 16 until it stays above 3.5 after the sweep, whatever the other tests sent this
    # server (their history once summed to the sweep's own 2.000, and the totals' reading passed).
    for _ in range(40):
        counts = by_hand.ModelCounts.read(triton.http_url, CPU_ENCODER)
        if (counts.inferences + 6) / (counts.executions + 6) > 3.5:
            break
        by_hand.send(triton.http_address, CPU_ENCODER, np.concatenate([pixels] * 16), clients=1, per_client=1)
    return checks.stats_avg_batch(answer, http_url=triton.http_url, model=CPU_ENCODER, sweep=sweep, exercise="t.stats")


def read(http_url, model):
    return httpx.get(f"{http_url}/v2/models/{model}/versions/1/stats", timeout=10).json()["model_stats"][0]


@pytest.mark.triton
def test_stats_avg_batch_passes_the_deltas_ratio(triton, pixels):
    def executed_batch(http_url, model, sweep):
        before = read(http_url, model)
        sweep()
        after = read(http_url, model)
        return (after["inference_count"] - before["inference_count"]) / (after["execution_count"] - before["execution_count"])

    swept = []
    r = stats(executed_batch, triton, pixels, swept)
    assert r.status == PASS, r.message
    assert swept == [1] and r.detail["inferences"] == 6 and 6 / 5 <= r.detail["avg_batch"] <= 3


def totals(http_url, model, sweep):
    sweep()
    after = read(http_url, model)
    return after["inference_count"] / after["execution_count"]


def inverted(http_url, model, sweep):
    before = read(http_url, model)
    sweep()
    after = read(http_url, model)
    return (after["execution_count"] - before["execution_count"]) / (after["inference_count"] - before["inference_count"])


@pytest.mark.triton
@pytest.mark.parametrize("answer, hint", [
    (totals, "since the server started"),
    (inverted, "executions per inference"),
    (lambda http_url, model, sweep: 1.0, "never called sweep()"),
])
def test_stats_avg_batch_names_what_a_wrong_reading_misses(triton, pixels, answer, hint):
    swept = []
    r = stats(answer, triton, pixels, swept)
    assert r.status == FAIL and hint in r.message, r.message
    assert swept == [1]  # the check ran the sweep once, itself when the answer did not


@pytest.mark.triton
def test_stats_avg_batch_student_version_still_runs_the_sweep(triton, pixels):
    swept = []
    assert stats(student, triton, pixels, swept).status == NOT_IMPLEMENTED and swept == [1]


# --- perf_analyzer's on/off sweep lines ------------------------------------------------------------------------

PA = dict(binary="build/perf_analyzer/perf_analyzer", models={"on": "enc", "off": "enc_mine"},
          address="127.0.0.1:8003", concurrency_range=(1, 2, 1), requests=4)


def sweep_lines(binary, models, address, concurrency_range, requests):
    lo, hi, by = concurrency_range
    rest = (f"--concurrency-range {lo}:{hi}:{by} --measurement-mode count_windows --measurement-request-count "
            f"{requests} -s 50 --max-trials 3 -u {address}")
    return {key: f"{binary} -m {model} {rest}" for key, model in models.items()}


@pytest.mark.parametrize("change, hint", [
    ({"off": "build/perf_analyzer/perf_analyzer -m enc_mine --concurrency-range 1:2:1 --measurement-request-count 4 "
             "-s 50 --max-trials 3 -u 127.0.0.1:8003"}, "count_windows"),
    ({"off": "build/perf_analyzer/perf_analyzer -m enc_mine --concurrency-range 1:2:1 --measurement-mode count_windows "
             "--measurement-request-count 4 -s 20 --max-trials 3 -u 127.0.0.1:8003"}, "differ beyond the model"),
    ({"on": "build/perf_analyzer/perf_analyzer -m enc --concurrency-range 2 --measurement-mode count_windows "
            "--measurement-request-count 4 -s 50 --max-trials 3 -u 127.0.0.1:8003"}, "--concurrency-range 1:2:1"),
    ({"on": "build/perf_analyzer/perf_analyzer -m enc_mine --concurrency-range 1:2:1 --measurement-mode count_windows "
            "--measurement-request-count 4 -s 50 --max-trials 3 -u 127.0.0.1:8003"}, "-m enc_mine; this measurement needs -m enc"),
    ({"on": None}, '"on" is missing'),
])
def test_perf_analyzer_sweep_names_what_a_wrong_line_breaks(tmp_path, change, hint):
    lines = {**sweep_lines(**{k: v for k, v in PA.items() if k != "binary"}, binary=PA["binary"]), **change}
    r = checks.perf_analyzer_sweep(lines, out_dir=tmp_path, exercise="t.sweep", **PA)
    assert r.status == FAIL and hint in r.message, r.message


def test_perf_analyzer_sweep_student_version(tmp_path):
    assert checks.perf_analyzer_sweep(student, out_dir=tmp_path, exercise="t.sweep", **PA).status == NOT_IMPLEMENTED


@pytest.mark.triton
def test_perf_analyzer_sweep_runs_both_lines_over_the_range(triton, mine, tmp_path):
    from servelab.triton import perf_analyzer as pa

    binary = pa.find()
    if binary is None:
        pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
    httpclient.InferenceServerClient(triton.http_address).load_model(MINE, headers=triton.headers)
    r = checks.perf_analyzer_sweep(sweep_lines, binary=binary, models={"on": CPU_ENCODER, "off": MINE},
                                   address=triton.http_address, concurrency_range=(1, 2, 1), requests=4,
                                   out_dir=tmp_path, exercise="t.sweep")
    assert r.status == PASS, r.message
    rows = r.detail["rows"]
    assert sorted((row["batching"], row["concurrency"]) for row in rows) == [("off", 1), ("off", 2), ("on", 1), ("on", 2)]
    assert all(row["throughput_img_s"] > 0 and row["counted"] in (None, 4) for row in rows)
    table = by_hand.on_off_table(rows)
    assert list(table.index) == [1, 2] and table["on ÷ off"].iloc[-1] == pytest.approx(table["on"].iloc[-1] / table["off"].iloc[-1])
