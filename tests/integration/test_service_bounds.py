"""What one request may cost the service, through a real uvicorn on loopback: a body over the size limit is refused
before it is buffered, a body that stalls is dropped and its slot given back, and only JPEG, PNG and WebP images
are decoded. Raw sockets send what an HTTP client library would not (a Content-Length with no body behind it)."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import http.client
import io
import json
import socket
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from PIL import Image

from servelab.data import encode, synthetic_photo
from servelab.service.process import ServiceProcess

MAX_BODY = 256 * 1024
BODY_TIMEOUT_S = 1.0
HEADER_TIMEOUT_S = 1.0
ANSWER_WITHIN_S = 60.0  # generous: the claim is that an answer comes at all, not how fast
SMALL_JPEG = encode(synthetic_photo(2, (96, 64)))


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """The service on the emulated device (no model to load), with a small body limit and body timeout, and two
    admission slots, so that two stalled clients would shut everyone out if they were never dropped."""
    tmp = tmp_path_factory.mktemp("bounded")
    env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": "flat", "SERVELAB_DEVICE_DIR": tmp / "devices",
           "SERVELAB_WARMUP_ITERS": 1, "SERVELAB_MAX_BODY_BYTES": MAX_BODY,
           "SERVELAB_BODY_TIMEOUT_S": BODY_TIMEOUT_S, "SERVELAB_HEADER_TIMEOUT_S": HEADER_TIMEOUT_S,
           "SERVELAB_MAX_IN_FLIGHT": 2}
    with ServiceProcess(env=env, log_path=tmp / "service.log") as svc:
        yield svc


def oversized_bodies() -> dict[str, tuple[str, dict[str, str], bytes]]:
    """Each body format, over the limit: (path, headers, body)."""
    rng = np.random.default_rng(0)
    big = SMALL_JPEG + rng.bytes(2 * MAX_BODY)  # refused for its size, never looked at as an image
    multipart = httpx.Request("POST", "http://x/embed", files=[("files", ("big.jpg", big, "image/jpeg"))])
    return {
        "raw": ("/embed", {"Content-Type": "image/jpeg"}, big),
        "base64": ("/embed/base64", {"Content-Type": "application/json"},
                   json.dumps({"images": [base64.b64encode(big).decode()]}).encode()),
        "tensor": ("/embed/tensor", {"Content-Type": "application/octet-stream", "X-Shape": "1,3,224,224"},
                   np.zeros((1, 3, 224, 224), np.float32).tobytes()),
        "multipart": ("/embed", {"Content-Type": multipart.headers["content-type"]}, multipart.read()),
    }


def exchange(url: str, head: str, body: bytes = b"", timeout: float = ANSWER_WITHIN_S) -> tuple[int, dict]:
    """Send `head` (request line and headers) and `body` as they are, then read the answer: (status, JSON body)."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read())


def request_head(path: str, headers: dict[str, str]) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("fmt", ["raw", "base64", "tensor", "multipart"])
def test_a_body_announced_over_the_limit_is_413_before_it_is_sent(bounded, fmt):
    path, headers, body = oversized_bodies()[fmt]
    assert len(body) > MAX_BODY
    # only the headers go: the answer cannot wait for a body that never comes
    status, answer = exchange(bounded.url, request_head(path, {**headers, "Content-Length": str(len(body))}))
    assert status == 413, answer
    assert answer["error"]["code"] == "body_too_large" and f"limit is {MAX_BODY} bytes" in answer["error"]["message"]


@pytest.mark.parametrize("fmt", ["raw", "base64", "tensor", "multipart"])
def test_a_chunked_body_over_the_limit_is_413_by_the_bytes_read(bounded, fmt):
    path, headers, body = oversized_bodies()[fmt]

    def chunks():  # an iterator: httpx sends it chunked, with no Content-Length
        for start in range(0, len(body), 32 * 1024):
            yield body[start:start + 32 * 1024]

    r = httpx.post(bounded.url + path, content=chunks(), headers=headers, timeout=ANSWER_WITHIN_S)
    assert "content-length" not in r.request.headers and r.request.headers["transfer-encoding"] == "chunked"
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "body_too_large"


def test_a_stalled_body_is_dropped_with_408_while_others_are_served(bounded):
    def stalled() -> tuple[int, dict]:  # announces 1000 bytes, sends 10, then waits for the answer
        return exchange(bounded.url, request_head("/embed", {"Content-Type": "image/jpeg", "Content-Length": "1000"}),
                        SMALL_JPEG[:10])

    def normal() -> httpx.Response:
        return httpx.post(bounded.url + "/embed", content=SMALL_JPEG, headers={"Content-Type": "image/jpeg"},
                          timeout=ANSWER_WITHIN_S)

    with cf.ThreadPoolExecutor(3) as pool:
        slow = pool.submit(stalled)
        assert normal().status_code == 200  # one slot is the stalled client's, the other serves
        status, answer = slow.result(timeout=ANSWER_WITHIN_S)
        assert status == 408 and answer["error"]["code"] == "body_timeout", answer
        # both slots taken by stalled clients: once they are dropped, their slots serve again
        both = [pool.submit(stalled) for _ in range(2)]
        assert [f.result(timeout=ANSWER_WITHIN_S)[0] for f in both] == [408, 408]
    r = normal()
    assert r.status_code == 200, r.text


def _image(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (20, 120, 220)).save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "TIFF"])
def test_other_image_formats_are_refused_naming_the_allowed_ones(bounded, fmt):
    image = _image(fmt)
    answers = [
        httpx.post(bounded.url + "/embed", content=image, headers={"Content-Type": "image/png"}),
        httpx.post(bounded.url + "/embed", files=[("files", (f"a.{fmt.lower()}", image, "image/png"))]),
        httpx.post(bounded.url + "/embed/base64", json={"images": [base64.b64encode(image).decode()]}),
    ]
    for r in answers:
        assert r.status_code == 415, r.text
        error = r.json()["error"]
        assert error["code"] == "unsupported_image_format"
        assert fmt in error["message"] and "JPEG, PNG or WebP" in error["message"]
    ok = httpx.post(bounded.url + "/embed", content=_image("PNG"), headers={"Content-Type": "image/png"})
    assert ok.status_code == 200, ok.text


def test_a_request_head_that_trickles_is_closed_while_others_are_served(bounded):
    """A client sending its headers a byte at a time never reaches the app (it runs once the head is complete), so
    no admission slot bounds it: the connection itself is closed once the head is late, and a normal request on
    another connection is answered meanwhile. Before the bound, such a connection stayed open indefinitely."""
    where = urlsplit(bounded.url)
    with socket.create_connection((where.hostname, where.port), timeout=1.0) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert httpx.get(f"{bounded.url}/healthz", timeout=ANSWER_WITHIN_S).status_code == 200
        for _ in range(int(ANSWER_WITHIN_S)):  # one byte a second, never the end of the head
            try:
                sock.sendall(b"a")
                received = sock.recv(1024)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return  # closed by the server
            assert received == b"", f"the server answered a head it never received whole: {received[:80]!r}"
            return  # closed by the server (end of stream)
        pytest.fail(f"a head trickling for {ANSWER_WITHIN_S:.0f} s kept its connection open")
