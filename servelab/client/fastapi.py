"""HTTP backend for the servelab FastAPI service (one pooled connection per client)."""

from __future__ import annotations

import numpy as np

from servelab.client.base import Backend
from servelab.client.errors import InferenceError, ServiceUnavailable
from servelab.config import SERVICE_PORT

DEFAULT_URL = f"http://127.0.0.1:{SERVICE_PORT}"
BINARY = "application/octet-stream"


class FastAPIBackend(Backend):
    name = "fastapi"

    def __init__(self, url: str | None = None, timeout: float = 60.0):
        import httpx

        self.url = (url or DEFAULT_URL).rstrip("/")
        self._httpx = httpx
        self.http = httpx.Client(
            base_url=self.url, timeout=timeout, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1)
        )

    def _post(self, path: str, **kwargs) -> np.ndarray:
        headers = {"Accept": BINARY, **kwargs.pop("headers", {})}
        try:
            r = self.http.post(path, headers=headers, **kwargs)
        except self._httpx.TransportError as exc:
            raise ServiceUnavailable(f"no service at {self.url}: {exc}", backend=self.name) from None
        if r.status_code != 200:
            try:
                err = r.json()["error"]
                code, msg = err.get("code"), err.get("message", r.text)
            except Exception:
                code, msg = None, r.text[:500]
            cls = ServiceUnavailable if r.status_code == 503 else InferenceError
            raise cls(msg, status=r.status_code, code=code, backend=self.name,
                      retry_after=retry_after_s(r.headers.get("retry-after")))
        self.weights = r.headers.get("x-servelab-weights", self.weights)
        n, d = (int(x) for x in r.headers["x-shape"].split(","))
        return np.frombuffer(r.content, dtype="<f4").reshape(n, d).astype(np.float32)

    def embed_encoded(self, blobs):
        files = [("files", (f"image{i}", b, "application/octet-stream")) for i, b in enumerate(blobs)]
        return self._post("/embed", files=files)

    def embed_tensor(self, batch):
        """float32 [N, 3, 224, 224], or uint8 pixels of that shape (a quarter of the bytes; the service normalises)."""
        dtype = "uint8" if np.asarray(batch).dtype == np.uint8 else "float32"
        batch = np.ascontiguousarray(batch, dtype=np.uint8 if dtype == "uint8" else "<f4")
        return self._post(
            "/embed/tensor",
            content=batch.tobytes(),
            headers={"Content-Type": BINARY, "X-Shape": ",".join(map(str, batch.shape)), "X-Dtype": dtype},
        )

    def ready(self) -> bool:
        try:
            r = self.http.get("/readyz", timeout=2.0)
        except self._httpx.TransportError:
            return False
        if r.status_code == 200:
            self.weights = r.json().get("weights", "")
        return r.status_code == 200

    def info(self):
        try:
            return {"backend": self.name, "url": self.url, **self.http.get("/info", timeout=5).json()}
        except Exception as exc:
            return {"backend": self.name, "url": self.url, "error": str(exc)}

    def close(self):
        self.http.close()


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header (seconds, or an HTTP date) as seconds from now; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import datetime as dt
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())
