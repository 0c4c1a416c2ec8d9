"""`wrk`, a load generator in C, driving one POST body at a server from a pinned core.

    res = wrk_run("http://127.0.0.1:8002/embed/tensor", body, {"X-Shape": "1,3,224,224"}, connections=8,
                  duration_s=5, cores="0")
    res.requests_per_s, res.p50_ms, res.non_2xx, res.cpu_s

A Python load generator cannot offer more than a few thousand requests per second from one core, which is less
than a bare ASGI app answers: measuring a server's own cost per request needs a client that costs far less than
the server. wrk (Debian's `wrk` package, one C thread with an event loop) is that client; a Lua script gives it
the body and headers and prints its summary as one JSON line, and `taskset` keeps it on its own cores. Its CPU
time is read from the kernel's accounting of the child (`getrusage`), so a record can show the client was not
the limit.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import ServelabError

MARK = "WRK_JSON "
_SCRIPT = """
local f = assert(io.open(%(body)s, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
%(headers)s
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('%(mark)s{"requests": %%d, "duration_us": %%d, "bytes": %%d, "connect": %%d, ' ..
    '"read": %%d, "write": %%d, "status": %%d, "timeout": %%d, "p50_us": %%d, "p99_us": %%d, "mean_us": %%.1f}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
"""


class WrkError(ServelabError, RuntimeError):
    """wrk is missing, or it ran and reported nothing."""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    duration_s: float
    non_2xx: int       # answers that were not 2xx/3xx (wrk's "status" errors)
    socket_errors: int  # connect, read, write and timeout errors
    p50_ms: float
    p99_ms: float
    cpu_s: float       # the client's own CPU seconds (user + system) over the run

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def ok_per_s(self) -> float:
        """Answered requests per second that were 2xx (wrk counts a non-2xx answer as a request too)."""
        return max(self.requests - self.non_2xx, 0) / self.duration_s if self.duration_s > 0 else 0.0


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if not found:
        raise WrkError("wrk is not installed: `apt-get install wrk` (Debian/Ubuntu) or `brew install wrk` (macOS)")
    return found


def wrk_version() -> str:
    """wrk's version line, e.g. `wrk debian/4.1.0-3+b2 [epoll]`: the client every figure names."""
    out = subprocess.run([wrk_binary(), "--version"], capture_output=True, text=True, timeout=10)
    return ((out.stdout or out.stderr).splitlines() or ["wrk"])[0].split(" Copyright")[0].strip()


def lua_script(body_path: Path, headers: dict[str, str]) -> str:
    lines = "\n".join(f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items())
    return _SCRIPT % {"body": json.dumps(str(body_path)), "headers": lines, "mark": MARK}


def wrk_run(url: str, body: bytes, headers: dict[str, str], *, connections: int, duration_s: float,
            cores: str | None = None, timeout_s: float = 10.0) -> WrkResult:
    """One wrk run of `duration_s` with `connections` keep-alive connections on one thread, pinned to `cores`
    (taskset's list, e.g. "0"; None: not pinned)."""
    binary = wrk_binary()
    with tempfile.TemporaryDirectory(prefix="servelab-wrk-") as tmp:
        body_path = Path(tmp) / "body.bin"
        body_path.write_bytes(body)
        script = Path(tmp) / "post.lua"
        script.write_text(lua_script(body_path, headers))
        cmd = [binary, "-t1", f"-c{connections}", f"-d{max(duration_s, 1):g}s", f"--timeout={timeout_s:g}s",
               "-s", str(script), url]
        if cores is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", cores, *cmd]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + timeout_s + 30)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(MARK)), None)
    if out.returncode != 0 or line is None:
        raise WrkError(f"wrk reported nothing (exit {out.returncode}): {(out.stderr or out.stdout).strip()[-400:]}")
    s = json.loads(line[len(MARK):])
    return WrkResult(requests=s["requests"], duration_s=s["duration_us"] / 1e6, non_2xx=s["status"],
                     socket_errors=s["connect"] + s["read"] + s["write"] + s["timeout"],
                     p50_ms=s["p50_us"] / 1000, p99_ms=s["p99_us"] / 1000,
                     cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
