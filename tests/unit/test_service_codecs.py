"""The service's request codecs, without a server: bytes and headers in, images / tensor or a named refusal out."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import numpy as np
import pytest
import yaml
from PIL import Image
from starlette.requests import Request

from servelab.data import encode, synthetic_photo
from servelab.service import codecs
from servelab.service.bodies import BoundedBody
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
    ("application/octet-stream", "1,3,224,224", "int8", 400, "bad_dtype"),
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


def test_uint8_pixels_are_taken_as_they_came_and_normalised_into_the_batch_as_decoding_does():
    from servelab.model.preprocess import decode_image, pixels_pil, preprocess_bytes

    pixels = pixels_pil(decode_image(JPEG, reduce_to=224))[None]
    shape = codecs.tensor_shape("application/octet-stream", "1,3,224,224", "uint8", LIMITS)
    assert codecs.tensor_dtype("UINT8") == "uint8" and codecs.tensor_nbytes(shape, "uint8") == 3 * 224 * 224
    got = codecs.tensor_from_bytes(bytearray(np.ascontiguousarray(pixels).tobytes()), shape, "uint8")
    assert got.dtype == np.uint8 and np.array_equal(got, pixels) and got.flags.writeable
    rows = np.empty((1, 3, 224, 224), np.float32)
    codecs.into_batch(got, rows)
    assert np.array_equal(rows[0], preprocess_bytes(JPEG))  # exactly the service's own decoding
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    codecs.into_batch(x, rows)
    assert np.array_equal(rows, x)
    assert refused(codecs.tensor_from_bytes, b"\0" * 16, shape, "uint8").code == "bad_byte_count"


def test_an_engine_refuses_uint8_pixels_it_would_otherwise_take_as_normalised_values():
    from servelab.model.preprocess import engine_batch

    with pytest.raises(ValueError, match="normalise it first"):
        engine_batch(np.zeros((1, 3, 224, 224), np.uint8))


def test_a_body_in_a_writable_buffer_is_not_copied_and_one_in_bytes_is():
    x = np.ones((1, 3, 224, 224), np.float32)
    buffer = bytearray(x.tobytes())
    got = codecs.tensor_from_bytes(buffer, x.shape)
    assert np.shares_memory(got, np.frombuffer(buffer, np.uint8))
    assert codecs.tensor_from_bytes(bytes(buffer), x.shape).flags.writeable


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_one_non_finite_value_anywhere_is_refused(bad):
    x = np.zeros((2, 3, 224, 224), np.float32)
    x[1, 2, 223, 223] = bad
    assert refused(codecs.tensor_from_bytes, x.tobytes(), x.shape).code == "non_finite"
    assert codecs.finite(np.full((1, 3, 224, 224), np.finfo(np.float32).max))  # huge values are still finite


def test_the_body_is_read_into_one_buffer_and_a_wrong_length_is_counted():
    from servelab.service.bodies import read_into

    def receiver(chunks):
        messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

        async def receive():
            return messages.pop(0)
        return receive

    data = bytes(range(256)) * 10
    buffer, got = asyncio.run(read_into(receiver([data[:1000], data[1000:2000], data[2000:]]), len(data)))
    assert got == len(data) and buffer.tobytes() == data
    assert asyncio.run(read_into(receiver([data, data]), len(data)))[1] == 2 * len(data)
    assert asyncio.run(read_into(receiver([data[:10]]), len(data)))[1] == 10


def test_decode_images_preprocesses_and_names_the_bad_one():
    batch = codecs.decode_images([JPEG, JPEG], LIMITS)
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32 and np.isfinite(batch).all()
    err = refused(codecs.decode_images, [JPEG, b"not an image"], LIMITS)
    assert err.status == 400 and err.code == "not_an_image" and err.message.startswith("image 1:")


def _image(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "TIFF"])
def test_formats_other_than_jpeg_png_webp_are_refused_before_any_decoding(fmt):
    decoded = []
    err = refused(codecs.decode_images, [JPEG, _image(fmt)], LIMITS, lambda: decoded.append(1))
    assert err.status == 415 and err.code == "unsupported_image_format" and err.message.startswith("image 1 ")
    assert "JPEG, PNG or WebP" in err.message and fmt in err.message
    assert decoded == []  # the first image, a good JPEG, was not decoded either


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_jpeg_png_and_webp_are_decoded(fmt):
    assert codecs.decode_images([_image(fmt)], LIMITS).shape == (1, 3, 224, 224)


def test_decoding_checks_the_deadline_before_each_image():
    calls = []

    def deadline():
        calls.append(1)
        if len(calls) == 2:
            raise ApiError(503, "deadline_exceeded", "spent its time")

    assert refused(codecs.decode_images, [JPEG, JPEG, JPEG], LIMITS, deadline).code == "deadline_exceeded"
    assert len(calls) == 2  # the third image was never started


# --- bodies: size and time bounds around `receive` ----------------------------------------------------------

def _app_reading_the_body():
    """The smallest app that reads its whole body, with the refusal it met (or the bytes it read)."""
    seen = {}

    async def app(scope, receive, send):
        try:
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            seen["body"] = body
        except ApiError as exc:
            seen["refused"] = exc

    return app, seen


def _run(bounded, headers, messages, reads: list | None = None):
    async def receive():
        if reads is not None:
            reads.append(1)
        if not messages:
            await asyncio.Event().wait()  # a client that sends nothing more
        return messages.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/embed", "headers": headers, "query_string": b""}

    async def send(message):
        pass

    asyncio.run(bounded(scope, receive, send))


def test_a_body_announced_over_the_limit_is_413_before_any_of_it_is_read():
    app, seen = _app_reading_the_body()
    reads = []
    _run(BoundedBody(app, max_bytes=100, timeout_s=60), [(b"content-length", b"101")],
         [{"type": "http.request", "body": b"x" * 101, "more_body": False}], reads)
    assert seen["refused"].status == 413 and seen["refused"].code == "body_too_large"
    assert "101 bytes" in seen["refused"].message and "limit is 100 bytes" in seen["refused"].message
    assert reads == []


def test_a_chunked_body_is_413_once_its_bytes_pass_the_limit():
    app, seen = _app_reading_the_body()
    chunks = [{"type": "http.request", "body": b"x" * 40, "more_body": True} for _ in range(10)]
    _run(BoundedBody(app, max_bytes=100, timeout_s=60), [], chunks)
    assert seen["refused"].status == 413 and seen["refused"].code == "body_too_large"
    assert len(chunks) == 7  # three chunks read (120 bytes), the rest never asked for


def test_a_body_at_the_limit_passes_whole():
    app, seen = _app_reading_the_body()
    chunks = [{"type": "http.request", "body": b"x" * 50, "more_body": True},
              {"type": "http.request", "body": b"y" * 50, "more_body": False}]
    _run(BoundedBody(app, max_bytes=100, timeout_s=60), [(b"content-length", b"100")], chunks)
    assert seen["body"] == b"x" * 50 + b"y" * 50


def test_a_stalled_body_is_408():
    app, seen = _app_reading_the_body()
    _run(BoundedBody(app, max_bytes=100, timeout_s=0.05), [(b"content-length", b"100")],
         [{"type": "http.request", "body": b"x" * 10, "more_body": True}])
    assert seen["refused"].status == 408 and seen["refused"].code == "body_timeout"
    assert "10 bytes came" in seen["refused"].message


def _quantity(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return int(text[:-2]) * units[text[-2:]] if text[-2:] in units else int(text)


def test_the_default_body_limit_cannot_evict_the_kubernetes_pod():
    """A multipart body spills to /tmp (an emptyDir with a size limit) and any body is held in memory: one request
    at the limit must fit both with room to spare."""
    from servelab.config import CHECKOUT, Settings

    if CHECKOUT is None:
        pytest.skip("needs the course repository's k8s/")
    deployment = yaml.safe_load((CHECKOUT / "k8s/base/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    memory = _quantity(pod["containers"][0]["resources"]["limits"]["memory"])
    limit = Settings().max_body_bytes
    assert limit <= _quantity(tmp["emptyDir"]["sizeLimit"]) // 2
    assert limit <= memory // 8  # the body, its decoded copies and the model's own memory


# --- the decode on the engine's device: which files go there ------------------------------------------------------
def _jpeg(**save) -> bytes:
    buf = io.BytesIO()
    synthetic_photo(5, (320, 240)).save(buf, format="JPEG", **save)
    return buf.getvalue()


def test_upright_baseline_jpegs_go_to_the_device_as_they_came():
    grey = io.BytesIO()
    synthetic_photo(6, (200, 300)).convert("L").save(grey, format="JPEG")
    got = codecs.device_jpegs([JPEG, grey.getvalue()], LIMITS)
    assert got is not None and got.blobs == (JPEG, grey.getvalue()) and len(got) == 2


def _rotated_jpeg() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to view
    return _jpeg(exif=exif.tobytes())


def _cmyk_jpeg() -> bytes:
    buf = io.BytesIO()
    synthetic_photo(7, (64, 64)).convert("CMYK").save(buf, format="JPEG")
    return buf.getvalue()


def _png() -> bytes:
    buf = io.BytesIO()
    synthetic_photo(8, (64, 64)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("make, why", [
    (_png, "a PNG"), (lambda: _jpeg(progressive=True), "a progressive JPEG"), (_rotated_jpeg, "an EXIF rotation"),
    (_cmyk_jpeg, "a CMYK JPEG"), (lambda: b"", "an empty file"), (lambda: b"not an image at all", "not an image"),
    (lambda: encode(synthetic_photo(9, (2000, 1500))), "over the pixel limit"),
])
def test_a_request_with_any_file_the_device_would_read_otherwise_takes_the_cpu_path(make, why):
    assert codecs.device_jpegs([JPEG, make()], LIMITS) is None, why
    assert codecs.device_jpegs([JPEG], LIMITS) is not None
