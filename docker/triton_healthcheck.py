"""HEALTHCHECK for the Triton container: /v2/health/ready on the container's HTTP port (8000)."""

import sys
import urllib.request

try:
    with urllib.request.urlopen("http://127.0.0.1:8000/v2/health/ready", timeout=3) as resp:
        sys.exit(0 if resp.status == 200 else 1)
except Exception as exc:  # noqa: BLE001 - any failure means not ready
    print(f"triton not ready: {exc}", file=sys.stderr)
    sys.exit(1)
