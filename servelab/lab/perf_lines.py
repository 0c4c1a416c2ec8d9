"""perf_analyzer command lines a student typed, run in turns and compared: each line as a shell would run it
(its `VAR=value` assignments in the environment), the lines alternating round after round (A B C, then C B A…) so
the machine's drift falls on every side alike, one `load` record per run and an `ab` record per pair of lines
whose pair ratios give the comparison its spread, read by servelab.bench.report like any other A/B.

    results = alternate(step.run, "07-pa", lines, rounds=3, out_dir=step.out_dir / "logs")
    grpc_vs_http = ratio(step.run, "07-pa", results, "grpc", "http")     # step.ratio(grpc_vs_http)
"""

from __future__ import annotations

from pathlib import Path

from servelab.bench.servers.triton_served import triton_machine
from servelab.lab.rounds import order, ratio_record
from servelab.triton import perf_analyzer as pa


def port(argv: list[str]) -> int | None:
    """The server port a perf_analyzer argv talks to (its `-u host:port`), None without one."""
    url = pa.option(argv, "-u", "--url")
    tail = (url or "").rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def alternate(run, experiment: str, lines: dict[str, str], *, rounds: int, out_dir: Path,
              timeout: float = 120.0) -> dict[str, list[dict]]:
    """Run every line of `lines` (label -> typed command line) `rounds` times, the order reversed every other
    round; each run writes one `load` record (perf_analyzer's throughput, latencies, server queue and compute, and
    the TCP connections it held to the server). Returns label -> its records, in round order."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    labels, results = list(lines), {label: [] for label in lines}
    for k in range(rounds):
        for label in order(labels, k):
            env, argv = pa.parse_line(lines[label])
            csv = out_dir / f"{experiment}-{label.replace(' ', '_')}-{k}.csv"
            if "-f" in argv:  # the lab keeps each run's CSV itself
                i = argv.index("-f")
                del argv[i:i + 2]
            r = pa.run(argv + ["-f", str(csv)], csv, timeout=timeout, env=env, count_port=port(argv))
            protocol = pa.option(argv, "-i", "--protocol", default="http")
            served_by = triton_machine(pa.option(argv, "-u", "--url", default="localhost:8000"), None)
            results[label].append(run.record(
                experiment, kind="load", server=f"triton-{protocol}", backend="perf_analyzer", protocol=protocol,
                payload="tensor", batch=int(pa.option(argv, "-b", "--batch-size", default="1")),
                concurrency=r.concurrency, throughput_img_s=r.throughput_img_s, latency_p50_ms=r.latency_p50_ms,
                latency_p99_ms=r.latency_p99_ms, repeats=1,
                server_stats={"avg_queue_ms": r.server_queue_ms, "avg_compute_infer_ms": r.server_compute_ms},
                params={"label": label, "round": k, "line": lines[label], "environment": env,
                        "connections": r.connections, "served_by": served_by},
                note="one perf_analyzer run of the line in params.line; connections: the most TCP connections it "
                     "held to the server at once"))
    return results


def ratio(run, experiment: str, results: dict[str, list[dict]], a: str, b: str, *, quick: bool = False) -> dict:
    """The `ab` record of line `a` against line `b`: throughput a ÷ b over the rounds (servelab.lab.rounds)."""
    first = results[a][0]
    return ratio_record(run, experiment, a, b, [r["throughput_img_s"] for r in results[a]],
                        [r["throughput_img_s"] for r in results[b]], quick=quick, batch=first["batch"],
                        concurrency=first["concurrency"], payload="tensor", backend="perf_analyzer",
                        params={"served_by": first["params"].get("served_by")},
                        note="throughput A ÷ B of two perf_analyzer lines run back to back, round after round; "
                             "min–max over the rounds")
