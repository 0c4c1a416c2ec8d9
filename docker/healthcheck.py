"""HEALTHCHECK for the service images: GET /readyz on the container's own port (slim images have no curl).

Readiness, not liveness: /healthz answers as soon as uvicorn listens, while the model is still loading, so a
`depends_on: condition: service_healthy` (or a load balancer reading Docker's health) would send traffic to a
service that cannot answer yet. /readyz turns 200 only after a real batch has run through the engine.
"""

import os
import sys
import urllib.request

port = os.environ.get("SERVELAB_PORT", "8002")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=3) as resp:
        sys.exit(0 if resp.status == 200 else 1)
except Exception as exc:  # noqa: BLE001 - any failure (503 while loading included) means not healthy yet
    print(f"readyz failed: {exc}", file=sys.stderr)
    sys.exit(1)
