"""HEALTHCHECK for the service images: GET /healthz on the container's own port (slim images have no curl)."""

import os
import sys
import urllib.request

port = os.environ.get("SERVELAB_PORT", "8002")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as resp:
        sys.exit(0 if resp.status == 200 else 1)
except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
    print(f"healthz failed: {exc}", file=sys.stderr)
    sys.exit(1)
