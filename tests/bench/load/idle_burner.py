"""Makes its parent server busy while idle (a test helper): started in the server's process group, it runs
`--burners` processes that spin on the CPU whenever the server has used no CPU for `--quiet-ms`, and sleep
while it works — an idle server's background polling, made large enough that its effect is certain.

    sh -c 'python idle_burner.py --burners 4 & exec python -m servelab.service'   # the server is the parent
"""

from __future__ import annotations

import argparse
import os
import time


def server_ticks(pid: int) -> int:
    """User + system clock ticks of every thread of `pid` so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def burn_while_idle(server: int, quiet_s: float, slice_s: float = 0.02) -> None:
    last, changed_at = server_ticks(server), time.monotonic()
    while True:
        try:
            ticks = server_ticks(server)
        except OSError:
            return  # the server is gone
        now = time.monotonic()
        if ticks != last:
            last, changed_at = ticks, now
        if now - changed_at < quiet_s:
            time.sleep(slice_s)  # the server is working: keep out of its way
            continue
        while time.monotonic() < now + slice_s:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", type=int, default=4)
    ap.add_argument("--quiet-ms", type=float, default=100.0)
    args = ap.parse_args()
    server = os.getppid()
    for _ in range(args.burners - 1):
        if os.fork() == 0:
            break
    burn_while_idle(server, args.quiet_ms / 1000.0)


if __name__ == "__main__":
    main()
