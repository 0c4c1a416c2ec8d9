"""The service's request codecs, without a server: bytes and headers in, images / tensor or a named refusal out."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
from starlette.requests import Request

from servelab.data import encode, synthetic_photo
from servelab.service import codecs
from servelab.service.errors import ApiError

LIMITS = codecs.Limits(max_images=3, max_bytes=1_000_000, max_pixels=2_000_000)
JPEG = encode(synthetic_photo(3, (320, 240)))


def refused(fn, *args) -> ApiError:
    with pytest.raises(ApiError) as exc:
        fn(*args)
    return exc.value


def multipart_request(files) -> Request:
    """A starlette Request carrying a multipart body encoded by httpx, as uvicorn would hand it over."""
    encoded = httpx.Request("POST", "http://x/embed", files=files)
    body = encoded.read()
    headers = [(k.lower().encode(), v.encode()) for k, v in encoded.headers.items()]
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/embed", "headers": headers, "query_string": b""}, receive)


def test_media_type_ignores_parameters_and_case():
    assert codecs.media_type("Image/JPEG; charset=binary") == "image/jpeg"
    assert codecs.media_type(None) == ""


def test_multipart_gives_every_file_in_order():
    files = [("a", ("1.jpg", JPEG, "image/jpeg")), ("b", ("2.jpg", b"second", "image/jpeg"))]
    assert asyncio.run(codecs.multipart_images(multipart_request(files), LIMITS)) == [JPEG, b"second"]


def test_multipart_over_the_limit_is_413_with_the_limit():
    files = [("f", (f"{i}.jpg", b"x", "image/jpeg")) for i in range(10)]
    with pytest.raises(ApiError) as exc:
        asyncio.run(codecs.multipart_images(multipart_request(files), LIMITS))
    assert exc.value.status == 413 and exc.value.code == "too_many_images" and "maximum is 3" in exc.value.message


def test_raw_body_is_one_image_and_empty_is_refused():
    assert codecs.raw_image(JPEG) == [JPEG]
    assert refused(codecs.raw_image, b"").code == "empty"


def test_base64_accepts_plain_and_data_urls():
    b64 = base64.b64encode(JPEG).decode()
    body = json.dumps({"images": [b64, "data:image/jpeg;base64," + b64]}).encode()
    assert codecs.base64_images(body, LIMITS) == [JPEG, JPEG]


@pytest.mark.parametrize("body, status, code", [
    (b"", 400, "empty"),
    (b"{nope", 400, "bad_json"),
    (b'{"imgs": []}', 422, "bad_schema"),
    (b'{"images": [1, 2]}', 422, "bad_schema"),
    (b'{"images": ["not base64!!"]}', 400, "bad_base64"),
    (b'{"images": []}', 400, "empty"),
    (json.dumps({"images": ["aGVsbG8="] * 4}).encode(), 413, "too_many_images"),
])
def test_base64_refusals_are_named(body, status, code):
    err = refused(codecs.base64_images, body, LIMITS)
    assert (err.status, err.code) == (status, code) and err.message


def test_tensor_roundtrip():
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    shape = codecs.tensor_shape("application/octet-stream", "2,3,224,224", None, LIMITS)
    out = codecs.tensor_from_bytes(x.tobytes(), shape)
    assert shape == (2, 3, 224, 224) and np.array_equal(out, x) and out.flags.writeable


@pytest.mark.parametrize("ctype, shape, dtype, status, code", [
    ("text/plain", "1,3,224,224", None, 415, "unsupported_media_type"),
    ("application/octet-stream", "1,3,224,224", "float16", 400, "bad_dtype"),
    ("application/octet-stream", None, None, 400, "missing_shape"),
    ("application/octet-stream", "1,3,x,224", None, 400, "bad_shape"),
    ("application/octet-stream", "1,3,64,64", None, 400, "bad_shape"),
    ("application/octet-stream", "4,3,224,224", None, 413, "too_many_images"),
])
def test_tensor_headers_are_checked_before_the_body(ctype, shape, dtype, status, code):
    err = refused(codecs.tensor_shape, ctype, shape, dtype, LIMITS)
    assert (err.status, err.code) == (status, code)


def test_tensor_body_must_match_its_shape_and_be_finite():
    shape = (1, 3, 224, 224)
    assert refused(codecs.tensor_from_bytes, b"\0" * 16, shape).code == "bad_byte_count"
    assert refused(codecs.tensor_from_bytes, np.full(shape, np.inf, np.float32).tobytes(), shape).code == "non_finite"


def test_decode_images_preprocesses_and_names_the_bad_one():
    batch = codecs.decode_images([JPEG, JPEG], LIMITS)
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32 and np.isfinite(batch).all()
    err = refused(codecs.decode_images, [JPEG, b"not an image"], LIMITS)
    assert err.status == 400 and err.code == "not_an_image" and err.message.startswith("image 1:")
