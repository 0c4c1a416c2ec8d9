"""The shaped link really limits the rate and adds the round trip (real sockets on loopback, a few seconds)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from servelab.bench.servers.link import LOOPBACK, link_effect, link_profile, netem_support, network_link

MB = 1_000_000


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Handler(socketserver.StreamRequestHandler):
    """Line protocol: `ping` -> `pong`; `up N` -> reads N bytes then answers `ok`; `down N` -> sends N bytes."""

    def handle(self):
        while line := self.rfile.readline():
            cmd, _, n = line.decode().strip().partition(" ")
            if cmd == "ping":
                self.wfile.write(b"pong\n")
            elif cmd == "up":
                left = int(n)
                while left:
                    left -= len(self.rfile.read(min(left, 65536)))
                self.wfile.write(b"ok\n")
            elif cmd == "down":
                self.wfile.write(b"x" * int(n))
            self.wfile.flush()


@pytest.fixture(scope="module")
def upstream():
    srv = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _connect(url: str) -> tuple[socket.socket, object]:
    host, port = url.split("://")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s, s.makefile("rb")


def _ping_ms(url: str, n: int = 5) -> tuple[float, list[float]]:
    times = []
    t = time.perf_counter()
    s, f = _connect(url)
    for _ in range(n + 1):
        s.sendall(b"ping\n")
        assert f.readline() == b"pong\n"
        times.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
    s.close()
    return times[0], times[1:]  # the first one includes connecting: the handshake's round trip


def test_profiles_parse_and_reject_what_they_cannot_do():
    p = link_profile("wan-100mbit-20ms")
    assert (p.rate_mbit, p.rtt_ms, p.loss) == (100.0, 20.0, 0.0)
    assert link_profile("lan-1gbit-0.5ms").rate_mbit == 1000.0
    assert round(p.transfer_ms(602_112), 1) == 48.2  # a batch-1 float32 tensor at 100 Mbit/s
    assert not link_profile(LOOPBACK).shaped
    with pytest.raises(ValueError, match="like 'wan-100mbit-20ms'"):
        link_profile("fast")
    ok, _ = netem_support()
    if not ok:  # the relay cannot drop TCP bytes: a lossy profile is refused, not silently run without loss
        with pytest.raises(ValueError, match="packet loss needs tc netem"):
            with network_link("wan-10mbit-20ms-loss1pct", "127.0.0.1:1"):
                pass


def test_loopback_changes_nothing(upstream):
    with network_link("loopback", upstream) as link:
        assert link.url(upstream) == upstream
        assert link.params()["link_shaping"].startswith("none")


def test_shaped_link_adds_the_round_trip(upstream):
    _, direct = _ping_ms(upstream)
    with network_link("wan-50mbit-40ms", upstream) as link:
        first, shaped = _ping_ms(link.url(upstream))
        assert link.params() == {"link": "wan-50mbit-40ms", "link_shaping": link.shaping, "link_rate_mbit": 50.0,
                                 "link_rtt_ms": 40.0}
    added = min(shaped) - min(direct)
    assert 38.0 <= added <= 55.0, f"round trip added {added:.1f} ms, expected ~40 ms (pings {shaped})"
    assert first >= 78.0, f"first request {first:.1f} ms: the handshake's round trip is missing"


@pytest.mark.parametrize("direction", ["up", "down"])
def test_shaped_link_limits_the_rate(upstream, direction):
    size, rate_mbit, rtt_ms = 2 * MB, 40.0, 10.0
    with network_link(f"wan-{rate_mbit:g}mbit-{rtt_ms:g}ms", upstream) as link:
        s, f = _connect(link.url(upstream))
        s.sendall(b"ping\n")
        f.readline()  # connection open and warm
        t0 = time.perf_counter()
        if direction == "up":
            s.sendall(f"up {size}\n".encode() + b"y" * size)
            assert f.readline() == b"ok\n"
        else:
            s.sendall(f"down {size}\n".encode())
            got = 0
            while got < size:
                got += len(f.read1(65536))
        elapsed = time.perf_counter() - t0
        s.close()
    expected = size * 8 / (rate_mbit * 1e6) + rtt_ms / 1e3  # 0.41 s
    assert 0.9 * expected <= elapsed <= 1.3 * expected, \
        f"{direction}: {size} bytes took {elapsed:.3f} s, expected ~{expected:.3f} s at {rate_mbit} Mbit/s"


def test_the_rate_is_shared_by_concurrent_connections(upstream):
    size, rate_mbit = MB, 40.0
    with network_link(f"wan-{rate_mbit:g}mbit-2ms", upstream) as link:
        url = link.url(upstream)

        def pull(out: list):
            s, f = _connect(url)
            s.sendall(f"down {size}\n".encode())
            got = 0
            while got < size:
                got += len(f.read1(65536))
            s.close()
            out.append(time.perf_counter())

        done: list[float] = []
        t0 = time.perf_counter()
        threads = [threading.Thread(target=pull, args=(done,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    elapsed = max(done) - t0
    expected = 2 * size * 8 / (rate_mbit * 1e6)  # 0.4 s for both together, not 0.2 s each in parallel
    assert 0.9 * expected <= elapsed <= 1.4 * expected, f"two 1 MB pulls took {elapsed:.3f} s, expected ~{expected:.3f}"


def test_over_swaps_a_handles_urls_and_labels_its_records(upstream):
    import dataclasses

    @dataclasses.dataclass
    class Handle:  # the shape of servelab.bench server handles: the URLs its clients use, and settings
        url: str
        http_url: str
        grpc_url: str | None = None
        settings: dict = dataclasses.field(default_factory=dict)

    srv = Handle(url=upstream, http_url=upstream, settings={"max_batch": 16})
    with network_link("wan-100mbit-20ms", srv) as link:
        shaped = link.over(srv)
        assert shaped.url == shaped.http_url == link.url(upstream) != upstream
        assert shaped.grpc_url is None and srv.url == upstream  # the original handle is untouched
        assert shaped.settings == {"max_batch": 16, **link.params()}
        _, pings = _ping_ms(shaped.url, n=2)
        assert min(pings) >= 19.0  # its clients really cross the link
    with network_link("loopback", srv) as link:
        assert link.over(srv).url == upstream and link.over(srv).settings["link"] == "loopback"


def test_link_effect_states_measured_beside_expected_and_never_ranks_overlaps():
    lo = {"latency_p50_ms": 100.0, "latency_p50_min_ms": 98.0, "latency_p50_max_ms": 103.0, "payload": "tensor",
          "payload_bytes_per_request": 602_112}
    wan = {**lo, "latency_p50_ms": 170.0, "latency_p50_min_ms": 166.0, "latency_p50_max_ms": 175.0}
    text = link_effect(lo, wan, "wan-100mbit-20ms")
    assert text == ("tensor: p50 100 ms on loopback, 170 ms over wan-100mbit-20ms (+70 ms; the link alone should add "
                    "68 ms: 48.2 ms to serialise 602 kB at 100 Mbit/s + 20 ms round trip)")
    noisy = {**wan, "latency_p50_ms": 104.0, "latency_p50_min_ms": 90.0, "latency_p50_max_ms": 180.0}
    assert "indistinguishable here" in link_effect(lo, noisy, "wan-100mbit-20ms", name="JPEG to the service")


def test_link_effect_reads_the_alternating_pairs_over_window_ranges_drift_widened():
    """A lesson once called a JPEG's p50 "indistinguishable here" (window ranges 90–216 and 111–264 ms, widened
    by drift) in the same sentence as its pairs "1.22×, every pair past the 10 % margin"."""
    lo = {"latency_p50_ms": 95.0, "latency_p50_min_ms": 90.6, "latency_p50_max_ms": 215.8, "payload": "jpeg",
          "payload_bytes_per_request": 26_737}
    wan = {**lo, "latency_p50_ms": 121.0, "latency_p50_min_ms": 110.9, "latency_p50_max_ms": 263.7}
    ranked = {"ratio": 1.22, "ratio_min": 1.18, "ratio_max": 1.26, "repeats": 4, "stable": True}
    assert "indistinguishable" not in link_effect(lo, wan, "wan-100mbit-20ms", pairs=ranked)
    assert "(+26 ms;" in link_effect(lo, wan, "wan-100mbit-20ms", pairs=ranked)
    close = {"ratio": 1.01, "ratio_min": 0.97, "ratio_max": 1.05, "repeats": 4, "stable": True}
    assert "indistinguishable here (the pairs do not rank them" in link_effect(lo, wan, "wan-100mbit-20ms", pairs=close)
