"""The network link between client and server: loopback, or a shaped link with a rate and a round-trip time.

Loopback hides what a real network costs: a 602 KB tensor takes ~48 ms to cross a 100 Mbit/s link, a 25 KB
JPEG ~2 ms, and every request pays the round trip. A *link profile* names such a link:

    loopback                 no shaping (the servers' own URLs)
    wan-100mbit-20ms         100 Mbit/s each way, 20 ms round trip (any `<name>-<rate>{k,m,g}bit-<rtt>ms` parses)

    with network_link("wan-100mbit-20ms", srv) as link:      # srv: a server handle (servelab.bench) or URLs
        measure(run, "07-link", link.over(srv), ...)        # its clients cross the link; the record says which
        link.url(service_url)                               # or just the URL that crosses it

How the link is shaped, and why not `tc netem`: netem (in a network namespace, as root) would shape in the
kernel and could also lose packets, but it needs the `sch_netem` qdisc; `netem_support()` probes for it and
says why it is missing (this course's reference machine runs a kernel built without it). The shaping used
everywhere is a user-space TCP relay in its own process (so the client's threads cannot delay it): one
token bucket per direction shared by all connections (the link's capacity), a one-way delay of RTT/2 each
way, the TCP handshake charged one RTT, and a bounded queue that pushes back on the sender. It does not
model packet loss (TCP over a relay never loses a byte: a profile with loss is refused), nor slow start.
Every record measured over a link carries `link`, `link_shaping`, `link_rate_mbit` and `link_rtt_ms`.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from servelab.errors import CannotRun, InvalidValue

LOOPBACK = "loopback"
SHAPING_NONE = "none (loopback)"
SHAPING_PROXY = "user-space relay (rate + delay, no loss)"
URL_FIELDS = ("url", "http_url", "grpc_url")  # where a server handle keeps the addresses its clients use
LINK_PROFILES = ("loopback", "wan-100mbit-20ms")  # the ones the lab uses; other names parse (see link_profile)

_NAME = re.compile(r"^(?:[a-z]+-)?(?P<rate>\d+(?:\.\d+)?)(?P<unit>[kmg])bit-(?P<rtt>\d+(?:\.\d+)?)ms"
                   r"(?:-loss(?P<loss>\d+(?:\.\d+)?)pct)?$")


@dataclass(frozen=True)
class LinkProfile:
    """A link: `rate_mbit` each way (None: unlimited), round-trip time, packet loss (fraction)."""

    name: str
    rate_mbit: float | None = None
    rtt_ms: float = 0.0
    loss: float = 0.0

    @property
    def shaped(self) -> bool:
        return self.name != LOOPBACK

    def transfer_ms(self, nbytes: int) -> float:
        """Time to serialise `nbytes` onto the link (what the rate alone costs one message), in ms."""
        return 0.0 if not self.rate_mbit else nbytes * 8 / (self.rate_mbit * 1e6) * 1e3


def link_profile(name: str | LinkProfile) -> LinkProfile:
    """`loopback`, or `<name>-<rate>{k,m,g}bit-<rtt>ms[-loss<pct>pct]` (e.g. wan-100mbit-20ms)."""
    if isinstance(name, LinkProfile):
        return name
    if name == LOOPBACK:
        return LinkProfile(LOOPBACK)
    m = _NAME.match(name or "")
    if not m:
        raise InvalidValue(f"link must be 'loopback' or like 'wan-100mbit-20ms' (rate, then round trip), got {name!r}")
    rate = float(m["rate"]) * {"k": 1e-3, "m": 1.0, "g": 1e3}[m["unit"]]
    if rate <= 0:
        raise InvalidValue(f"link {name!r}: the rate must be > 0")
    return LinkProfile(name, rate_mbit=rate, rtt_ms=float(m["rtt"]), loss=float(m["loss"] or 0) / 100)


def link_effect(loopback: dict, shaped: dict, link: str | LinkProfile, name: str | None = None,
                pairs: dict | None = None) -> str:
    """One sentence on what the link did to a point measured both ways (two records or table rows with
    latency_p50_ms, its window range and payload_bytes_per_request): measured p50 change beside what the link
    alone should add (the request's serialisation at the link's rate + one round trip) — or, when this run cannot
    tell the two apart, that the difference is inside its spread. `pairs`, the `ab` record of the two measured in
    alternating windows, decides that where given (drift widens each side's window range, the pairs cancel it);
    without it, overlapping p50 window ranges do."""
    from servelab.bench.report.verdicts import overlap, ratio_reading

    prof = link_profile(link)
    size = int(shaped.get("payload_bytes_per_request") or 0)
    expected = prof.transfer_ms(size) + prof.rtt_ms
    why = (f"the link alone should add {expected:.0f} ms: {prof.transfer_ms(size):.1f} ms to serialise "
           f"{size / 1000:.0f} kB at {prof.rate_mbit:g} Mbit/s + {prof.rtt_ms:g} ms round trip")
    lo, hi = loopback["latency_p50_ms"], shaped["latency_p50_ms"]
    head = f"{name or shaped.get('payload') or 'the request'}: p50 {lo:.0f} ms on loopback, {hi:.0f} ms over {prof.name}"
    apart = ratio_reading(pairs).ranked if pairs is not None else not overlap(loopback, shaped, "latency_p50_ms")
    if not apart:
        spread = "the pairs do not rank them" if pairs is not None else "their window ranges overlap"
        return f"{head}, indistinguishable here ({spread}; {why}, inside this run's spread)"
    return f"{head} ({hi - lo:+.0f} ms; {why})"


def netem_support() -> tuple[bool, str]:
    """Whether `tc netem` works here: tried in a throwaway network namespace (needs root and sch_netem)."""
    import os
    import shutil

    if shutil.which("tc") is None or shutil.which("ip") is None:
        return False, "tc/ip (iproute2) not installed"
    if os.geteuid() != 0:
        return False, "not root (network namespaces and qdiscs need CAP_NET_ADMIN)"
    ns = f"servelab-probe-{os.getpid()}"
    try:
        made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, timeout=10)
        if made.returncode:
            return False, f"cannot create a network namespace: {made.stderr.strip()}"
        tried = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                                "delay", "1ms"], capture_output=True, text=True, timeout=10)
        if tried.returncode:
            return False, f"the kernel has no sch_netem qdisc (tc: {tried.stderr.strip()})"
        return True, "tc netem works"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _host_port(url: str) -> tuple[str, int, object]:
    """('127.0.0.1', 8002, rebuild) for 'http://127.0.0.1:8002/x' or gRPC's scheme-less '127.0.0.1:8004'."""
    if "://" not in url:
        host, _, port = url.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidValue(f"expected host:port or a URL with a port, got {url!r}")
        return host, int(port), lambda h, p: f"{h}:{p}"
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if not parts.hostname or port is None:
        raise InvalidValue(f"cannot tell host and port from {url!r}")
    return parts.hostname, port, lambda h, p: urlunsplit(parts._replace(netloc=f"{h}:{p}"))


class Link:
    """An open link: shaped URLs for the servers it was opened for, and the labels for records."""

    def __init__(self, profile: LinkProfile, urls: dict[str, str], shaping: str, netem: str, pid: int | None = None):
        self.profile, self.shaping, self.netem, self.pid = profile, shaping, netem, pid
        self._urls = urls

    @property
    def name(self) -> str:
        return self.profile.name

    def url(self, url: str) -> str:
        """The URL that reaches the same server across this link."""
        if url not in self._urls:
            raise KeyError(f"{url!r} was not given to network_link(); it carries {', '.join(self._urls)}")
        return self._urls[url]

    def over(self, srv):
        """The same server handle with its clients crossing this link (its URLs swapped for the link's), and the
        link named in its settings, so every record measured through it says which link and which shaping."""
        import dataclasses

        changes = {f: self.url(getattr(srv, f)) for f in URL_FIELDS if getattr(srv, f, None)}
        settings = {**(getattr(srv, "settings", None) or {}), **self.params()}
        return dataclasses.replace(srv, settings=settings, **changes)

    def params(self) -> dict:
        """Record fields naming the link and how it was shaped (pass as `params=` to a measurement)."""
        return {"link": self.name, "link_shaping": self.shaping, "link_rate_mbit": self.profile.rate_mbit,
                "link_rtt_ms": self.profile.rtt_ms if self.profile.shaped else None}

    def __repr__(self) -> str:
        return f"Link({self.name}, {self.shaping})"


@contextlib.contextmanager
def network_link(link: str | LinkProfile, *servers, queue_ms: float = 500.0) -> Iterator[Link]:
    """Open `link` towards `servers` (URLs, or server handles: their url / http_url / grpc_url); yields a Link
    whose `.url(u)` and `.over(handle)` cross it.

    `loopback` changes nothing. A shaped profile starts the relay process (about half a second) and stops it
    on exit; its queue holds at most `queue_ms` of traffic before the sender is held back.
    """
    prof = link_profile(link)
    urls = list(dict.fromkeys(u for s in servers for u in ([s] if isinstance(s, str) else
                                                            [getattr(s, f, None) for f in URL_FIELDS]) if u))
    if not prof.shaped:
        yield Link(prof, {u: u for u in urls}, SHAPING_NONE, "not needed")
        return
    ok, why = netem_support()
    netem = f"tc netem available, not used: the relay shapes every link the same way ({why})" if ok else \
        f"tc netem unavailable: {why}"
    if prof.loss:
        raise InvalidValue(f"link {prof.name!r}: packet loss needs tc netem, and the user-space relay cannot lose "
                           f"TCP bytes ({netem}); drop the -loss part")
    targets = {u: _host_port(u) for u in urls}
    cmd = [sys.executable, "-m", "servelab.bench.servers.link", "--rtt-ms", str(prof.rtt_ms), "--queue-ms", str(queue_ms)]
    if prof.rate_mbit:
        cmd += ["--rate-mbit", str(prof.rate_mbit)]
    cmd += [f"{h}:{p}" for h, p, _ in targets.values()]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            raise CannotRun(f"the link relay exited before it listened (exit {proc.wait(5)})")
        ports = json.loads(line)["ports"]
        shaped = {u: rebuild("127.0.0.1", ports[f"{h}:{p}"]) for u, (h, p, rebuild) in targets.items()}
        yield Link(prof, shaped, SHAPING_PROXY, netem, pid=proc.pid)
    finally:
        proc.stdin.close()  # the relay exits when its stdin closes (also when this process dies)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# --- the relay process -------------------------------------------------------------------------------

CHUNK = 16 * 1024  # bytes forwarded at a time: ~1.3 ms at 100 Mbit/s, so delivery is close to packet-paced


class _Direction:
    """One direction of the link: a shared token bucket (when the wire is free next) and a fixed delay."""

    def __init__(self, rate_bps: float | None, delay_s: float, queue_s: float):
        self.rate_bps, self.delay_s, self.queue_s = rate_bps, delay_s, queue_s
        self.free_at = 0.0

    async def send(self, nbytes: int, loop) -> float:
        """Reserve the wire for `nbytes`; returns when they arrive at the far end (loop time)."""
        import asyncio

        now = loop.time()
        while self.free_at - now > self.queue_s:  # queue full: hold the sender back (TCP will feel it)
            await asyncio.sleep(self.free_at - now - self.queue_s)
            now = loop.time()
        start = max(now, self.free_at)
        self.free_at = start + (nbytes * 8 / self.rate_bps if self.rate_bps else 0.0)
        return self.free_at + self.delay_s


async def _pump(reader, writer, direction: _Direction, not_before: float) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver():
        while True:
            at, data = await queue.get()
            wait = max(at, not_before + direction.delay_s) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()

    task = asyncio.create_task(deliver())
    try:
        while data := await reader.read(CHUNK):
            queue.put_nowait((await direction.send(len(data), loop), data))
        queue.put_nowait((loop.time() + direction.delay_s, None))
        await task
    except (ConnectionError, OSError):
        task.cancel()


async def _relay(upstreams: list[str], rate_mbit: float | None, rtt_ms: float, queue_ms: float) -> None:
    import asyncio

    rate = rate_mbit * 1e6 if rate_mbit else None
    up = _Direction(rate, rtt_ms / 2e3, queue_ms / 1e3)  # client -> server, shared by every connection
    down = _Direction(rate, rtt_ms / 2e3, queue_ms / 1e3)
    loop = asyncio.get_running_loop()

    def handler(host: str, port: int):
        async def handle(c_reader, c_writer):
            opened = loop.time() + rtt_ms / 1e3  # the TCP handshake costs one round trip before data flows
            try:
                s_reader, s_writer = await asyncio.open_connection(host, port)
            except OSError:
                c_writer.close()
                return
            try:
                await asyncio.gather(_pump(c_reader, s_writer, up, opened), _pump(s_reader, c_writer, down, opened))
            except asyncio.CancelledError:  # the relay is shutting down with this connection still open
                pass
            finally:
                for w in (s_writer, c_writer):
                    w.close()
        return handle

    servers, ports = [], {}
    for target in upstreams:
        host, _, port = target.rpartition(":")
        srv = await asyncio.start_server(handler(host, int(port)), "127.0.0.1", 0)
        servers.append(srv)
        ports[target] = srv.sockets[0].getsockname()[1]
    print(json.dumps({"ports": ports}), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    for srv in servers:
        srv.close()


def main(argv: list[str] | None = None) -> None:
    import argparse
    import asyncio

    ap = argparse.ArgumentParser(prog="python -m servelab.bench.servers.link", description="shaping TCP relay (rate + delay)")
    ap.add_argument("upstreams", nargs="+", help="host:port of each server to relay to")
    ap.add_argument("--rate-mbit", type=float, default=None)
    ap.add_argument("--rtt-ms", type=float, default=0.0)
    ap.add_argument("--queue-ms", type=float, default=500.0)
    a = ap.parse_args(argv)
    asyncio.run(_relay(a.upstreams, a.rate_mbit, a.rtt_ms, a.queue_ms))


if __name__ == "__main__":
    main()
