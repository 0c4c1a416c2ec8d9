"""Two tiny synthetic lab runs compared: points within noise by their window ranges, headlines by the fields of
the findings they state."""

from servelab.bench.report import ratio_finding
from servelab.bench.report.headlines import record_headline
from servelab.bench.results.compare import compare
from servelab.bench.results.records import Run


def _run(root, name, points, headlines):
    run = Run(run_id=name, root=root, weights="random-init (seed 0)")
    for c, link, windows, p50s in points:
        thr = sum(windows) / len(windows)
        run.record("07-protocol", kind="load", server="triton-grpc", engine="onnx", protocol="grpc", payload="tensor",
                   batch=1, concurrency=c, throughput_img_s=thr, latency_p50_ms=sum(p50s) / len(p50s),
                   window_throughput_img_s=windows, window_latency_p50_ms=p50s,
                   spread=(max(windows) - min(windows)) / thr, params={"link": link})
    for key, (text, found) in headlines.items():
        record_headline(run.dir, key, text, found)
    return run


def _ratio(v, lo, hi, a="triton-grpc", b="triton-http"):
    return ratio_finding({"ratio": v, "ratio_min": lo, "ratio_max": hi, "repeats": 4, "a": a, "b": b,
                          "concurrency": 32})


def test_compare_two_runs_points_and_headlines(tmp_path):
    shows = ("the headline's words are not read", [_ratio(1.32, 1.2, 1.4)])
    _run(tmp_path, "A",
         [(1, "loopback", [10.0, 10.4, 10.2], [100, 98, 99]),
          (1, "wan-100mbit-20ms", [8.0, 8.1, 8.2], [125, 124, 123]),
          (32, "loopback", [20.0, 21.0, 20.5], [1500, 1480, 1520]),
          (64, "loopback", [20.0, 21.0, 20.5], [3000, 3000, 3000])],
         {"07": shows, "06a": ("", [_ratio(1.05, 1.01, 1.09, "fastapi", "triton-http")])})
    _run(tmp_path, "B",
         [(1, "loopback", [10.3, 10.6, 10.5], [97, 98, 96]),         # ranges overlap: noise
          (1, "wan-100mbit-20ms", [6.0, 6.1, 6.0], [160, 161, 162]),  # 25 % slower, 2 % spread: differs
          (32, "loopback", [21.0, 21.2, 21.1], [1470, 1490, 1480]),   # +3 %, inside the 5 % window range: noise
          (16, "loopback", [20.0, 20.0, 20.0], [800, 800, 800])],     # not in A
         {"07": ("other words, the same finding", [_ratio(1.35, 1.25, 1.45)]),
          "06a": ("", [_ratio(0.95, 0.91, 0.99, "fastapi", "triton-http")])})  # the lead changed sides
    c = compare(tmp_path / "A", tmp_path / "B")
    by = {p["point"]: p for p in c.points}
    assert by["triton-grpc onnx grpc tensor b=1 c=1 link=loopback"]["within_noise"]
    wan = by["triton-grpc onnx grpc tensor b=1 c=1 link=wan-100mbit-20ms"]  # the link keeps the two points apart
    assert not wan["within_noise"] and wan["verdict"].startswith("differs: throughput_img_s -25.5 % (noise 2.5 %), latency_p50_ms +29.8 %")
    assert by["triton-grpc onnx grpc tensor b=1 c=32 link=loopback"]["within_noise"]
    assert (len(c.points), c.within_noise, c.only_a, c.only_b) == (3, 2, 1, 1)
    assert abs(c.fraction_within_noise - 2 / 3) < 1e-9
    heads = {h["headline"]: h["verdict"] for h in c.headlines}
    assert heads == {"07": "same", "06a": "differs"}
    (d,) = next(h for h in c.headlines if h["headline"] == "06a")["differences"]
    assert d.startswith("fastapi÷triton-http throughput c=32: A consistent, fastapi ahead: fastapi÷triton-http 1.0")
    assert "| B consistent, triton-http ahead" in d and d.endswith("(the two runs' pairs do not overlap)")
    assert not c.reproduced
    assert "2 of 3 points within noise (67 %" in c.summary() and "1 of 2 headlines the same" in c.summary()
    assert compare(tmp_path / "A", tmp_path / "A").reproduced  # a run reproduces itself


def test_interleaved_ratio_records_compare_by_their_pair_range(tmp_path):
    for name, value, lo, hi in (("A", 1.30, 1.25, 1.36), ("B", 1.33, 1.28, 1.38), ("C", 1.00, 0.97, 1.03)):
        Run(run_id=name, root=tmp_path, weights="w").record(
            "07-ab", kind="ab", server="grpc / http", ratio=value, ratio_min=lo, ratio_max=hi, batch=4,
            concurrency=1)
    assert compare(tmp_path / "A", tmp_path / "B").points[0]["within_noise"]
    far = compare(tmp_path / "A", tmp_path / "C").points[0]
    assert not far["within_noise"] and far["ratio Δ%"] == -23.08



def _probed_run(root, name, probes, windows, ratio):
    run = Run(run_id=name, root=root, weights="w")
    for i, thr in enumerate(probes):
        run.record("drift-probe", kind="probe", server="in-process", engine="onnx", batch=1, concurrency=1,
                   throughput_img_s=thr, params={"before": f"nb{i}"})
    thr = sum(windows) / len(windows)
    run.record("06a", kind="load", server="fastapi", engine="onnx", protocol="http", payload="jpeg", batch=1,
               concurrency=8, throughput_img_s=thr, window_throughput_img_s=windows)
    run.record("06a-ab", kind="ab", server="a / b", ratio=ratio[0], ratio_min=ratio[1], ratio_max=ratio[2])
    return run


def test_machine_drift_from_the_probes_widens_absolute_figures_only(tmp_path):
    # the point moved 10 % with 2 % window bands; the ratio moved 12 % with 2 % pair bands
    _probed_run(tmp_path, "A", [], [20.0, 20.2, 20.4], (1.00, 0.99, 1.01))
    _probed_run(tmp_path, "B", [], [18.0, 18.2, 18.3], (1.12, 1.11, 1.13))
    bare = compare(tmp_path / "A", tmp_path / "B")
    assert bare.machine_drift is None and bare.within_noise == 0
    assert "no drift probe in either run" in bare.summary()
    # the same two runs, each with drift probes that moved up to ~12 % between measurements
    _probed_run(tmp_path, "C", [15.0, 14.1, 15.2, 13.6], [20.0, 20.2, 20.4], (1.00, 0.99, 1.01))
    _probed_run(tmp_path, "D", [13.2, 14.9, 15.1, 13.9], [18.0, 18.2, 18.3], (1.12, 1.11, 1.13))
    c = compare(tmp_path / "C", tmp_path / "D")
    assert 0.11 < c.machine_drift < 0.13 and c.probes == (4, 4)
    by = {p["experiment"]: p for p in c.points}
    assert by["06a"]["within_noise"] and by["06a"]["throughput_img_s noise%"] == round(100 * c.machine_drift, 2)
    assert not by["06a-ab"]["within_noise"]  # an interleaved ratio cancels drift: its own pair range is the noise
    assert by["06a-ab"]["machine B÷A"] is None  # nor does the machine's speed explain a ratio
    assert "9 of 10 pairs of drift-probe measurements differed by less than" in c.summary() and "4 + 4 measurements" in c.summary()
    # probes in one run only: no drift estimate
    assert compare(tmp_path / "A", tmp_path / "D").machine_drift is None


def _timed_run(root, name, probes, point_at, windows):
    """Probes (minute, img/s) and one served point taken at `point_at` minutes, with real-looking timestamps."""
    run = Run(run_id=name, root=root, weights="w")
    at = lambda minute: f"2026-11-23T10:{minute:02d}:00+00:00"  # noqa: E731
    for i, (minute, thr) in enumerate(probes):
        if minute > point_at >= (probes[i - 1][0] if i else -1):
            run.record("06a", kind="load", server="fastapi", engine="onnx", protocol="http", payload="jpeg", batch=1,
                       concurrency=8, throughput_img_s=sum(windows) / len(windows), window_throughput_img_s=windows,
                       timestamp=at(point_at))
        run.record("drift-probe", kind="probe", server="in-process", engine="onnx", batch=1, concurrency=1,
                   throughput_img_s=thr, params={"before": f"nb{i}"}, timestamp=at(minute))
    return run


def test_machine_speed_is_interpolated_between_the_probes_around_a_record():
    from servelab.bench.load.drift import machine_speed

    recs = [{"kind": "probe", "throughput_img_s": 10.0, "timestamp": "2026-11-23T10:00:00+00:00"},
            {"kind": "load", "timestamp": "2026-11-23T10:03:00+00:00"},
            {"kind": "probe", "throughput_img_s": 14.0, "timestamp": "2026-11-23T10:04:00+00:00"},
            {"kind": "load", "timestamp": "2026-11-23T10:05:00+00:00"},
            {"kind": "probe", "throughput_img_s": 10.0, "timestamp": "2026-11-23T10:08:00+00:00"},
            {"kind": "load", "timestamp": "2026-11-23T10:09:00+00:00"}]
    assert machine_speed(recs) == {1: 13.0, 3: 13.0, 5: 10.0}  # 3/4 of the way up, 1/4 of the way down; the last


def test_a_machine_measurably_faster_at_that_moment_explains_an_absolute_difference(tmp_path):
    steady = [(m, 10.0 + 0.1 * (m % 3)) for m in range(0, 48, 4)]  # 12 probes within 2 % of each other
    fast_then = [(m, 14.0 if m == 20 else v) for m, v in steady]    # B's machine 1.4× as fast around minute 20
    _timed_run(tmp_path, "A", steady, 21, [20.0, 20.2, 20.4])
    _timed_run(tmp_path, "B", fast_then, 21, [25.4, 25.6, 25.8])    # the point: +27 %; the machine at minute 21: +28 %
    c = compare(tmp_path / "A", tmp_path / "B")
    assert c.machine_drift < 0.05  # one fast probe of 24 leaves the 9-in-10 pairwise drift at the steady 2 %
    (p,) = c.points
    assert p["within_noise"] and p["for_machine"] and p["machine B÷A"] == round(13.0 / 10.15, 3)
    assert p["verdict"].startswith("within noise once the machine's speed is allowed for")
    assert c.within_noise_as_measured == 0 and "0 as measured, 1 more once the machine's speed" in c.summary()
    # the same speed-up in B without the machine moving: the stack changed, not the machine
    _timed_run(tmp_path, "C", steady, 21, [25.4, 25.6, 25.8])
    assert not compare(tmp_path / "A", tmp_path / "C").points[0]["within_noise"]
    # more than the machine moved, or the other way, is not explained by it
    _timed_run(tmp_path, "D", fast_then, 21, [30.4, 30.6, 30.8])
    _timed_run(tmp_path, "E", fast_then, 21, [14.6, 14.8, 15.0])
    for other in "DE":
        assert not compare(tmp_path / "A", tmp_path / other).points[0]["within_noise"]


def _triton_point(run, experiment, windows, **params):
    thr = sum(windows) / len(windows)
    run.record(experiment, kind="load", server="triton-http", engine="onnx", protocol="http", payload="tensor",
               batch=1, concurrency=1, throughput_img_s=thr, window_throughput_img_s=windows,
               params={"instances": 1, "max_queue_delay_us": 2000, **params})


def test_a_configuration_measured_again_in_the_same_run_widens_its_noise_to_that_runs_own_range(tmp_path):
    # no probes, so the noise is the window spread (2 %); each run measured the same Triton configuration in two
    # notebooks, minutes apart, 15.2 and 17.4 img/s in A, 17.8 and 17.3 in B: in B, 04's point is 17 % above A's
    for name, (first, later) in (("A", (15.2, 17.4)), ("B", (17.8, 17.3))):
        run = Run(run_id=name, root=tmp_path, weights="w")
        _triton_point(run, "04-triton-batch", [first * 0.99, first * 1.01], served_by="this machine")
        _triton_point(run, "07-protocol-batch", [later * 0.99, later * 1.01], side="b", ab={"pairs": 2},
                      served_by="the Triton server")  # bookkeeping params: the same configuration
        _triton_point(run, "05a-queue-delay", [first * 0.99, first * 1.01], max_queue_delay_us=0)  # another one
    c = compare(tmp_path / "A", tmp_path / "B")
    by = {p["experiment"]: p for p in c.points}
    assert by["04-triton-batch"]["within_noise"] and by["04-triton-batch"]["for_repeats"]
    assert "throughput_img_s A 15.2–17.4, B 17.3–17.8" in by["04-triton-batch"]["verdict"]
    # a configuration measured once per run gets no such allowance: its queue delay sets it apart
    assert not by["05a-queue-delay"]["within_noise"]
    assert (c.within_noise_as_measured, c.within_noise_for_repeats) == (1, 1)  # 07's points: 17.4 vs 17.3
    assert c.within_noise_as_measured + c.within_noise_for_machine + c.within_noise_for_repeats == c.within_noise
    # an interleaved comparison whose two sides differ only in their labels (a model reloaded between them) is no
    # repeat of anything: a 25 % slower "batching off" side must not widen the batching-on configuration's range
    for name in ("A", "B"):
        run = Run(run_id=name, root=tmp_path / "labels", weights="w")
        _triton_point(run, "04-triton-batch", [14.9, 15.1] if name == "A" else [17.9, 18.1])
        for side, windows in (("a", [15.0, 15.2]), ("b", [11.9, 12.1])):
            _triton_point(run, "04-batching", windows, side=side, ab={"a": "batching on", "b": "batching off"})
    by = {p["experiment"]: p for p in compare(tmp_path / "labels" / "A", tmp_path / "labels" / "B").points}
    assert not by["04-triton-batch"]["within_noise"]
    # ranges that do not meet still differ: B's configuration moved beyond anything A measured of it
    run = Run(run_id="C", root=tmp_path, weights="w")
    _triton_point(run, "04-triton-batch", [19.8, 20.2])
    _triton_point(run, "07-protocol-batch", [20.8, 21.2], side="b")
    assert not {p["experiment"]: p for p in compare(tmp_path / "A", tmp_path / "C").points}["04-triton-batch"][
        "within_noise"]


def test_overload_points_are_matched_by_their_multiple_of_capacity_not_their_rate(tmp_path):
    for name, capacity in (("A", 50.2), ("B", 52.5)):
        run = Run(run_id=name, root=tmp_path, weights="w")
        for level in (1, 8):
            run.record("overload", kind="load", server="fastapi", engine="onnx-int8", protocol="http", payload="jpeg",
                       batch=1, rate_rps=level * capacity, throughput_img_s=capacity, window_throughput_img_s=[
                           capacity * 0.97, capacity * 1.03], params={"phase": "open-loop", "level": level})
    c = compare(tmp_path / "A", tmp_path / "B")
    assert (len(c.points), c.only_a, c.only_b, c.within_noise) == (2, 0, 0, 2)
    assert sorted(p["point"].split()[-1] for p in c.points) == ["level=1", "level=8"]


def test_a_run_recorded_before_headlines_kept_their_findings_is_compared_on_its_points_only(tmp_path):
    import json

    points = [(1, "loopback", [10.0, 10.4, 10.2], [100, 98, 99])]
    _run(tmp_path, "A", points, {})
    (tmp_path / "A" / "headlines.json").write_text(json.dumps({"07": {"text": "grpc ahead", "claim": "grpc ahead"}}))
    _run(tmp_path, "B", points, {"07": ("grpc ahead", [_ratio(1.32, 1.2, 1.4)])})
    c = compare(tmp_path / "A", tmp_path / "B")
    assert [h["verdict"] for h in c.headlines] == ["not comparable"] and c.reproduced
    assert "0 of 0 headlines the same (1 not comparable: no verdict data, recorded as text only)" in c.summary()
