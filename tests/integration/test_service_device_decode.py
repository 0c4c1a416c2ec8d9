"""The service decoding JPEG files on the engine's device (SERVELAB_DECODE=device), under a real uvicorn on
loopback, with the torch engine on the CPU: what runs on a GPU as batched nvJPEG runs here through the same
path (the header check, the micro-batcher cutting JPEG requests into one batch, the engine's decode, resize and
normalisation, a bad file's refusal), with torchvision's decode_jpeg on the CPU where it loads and PIL standing in
for it where it does not (tests/unit/test_engine_parts.py says why; the stand-in is named in /info and in every
test that uses it). tests/gpu runs the same service on a GPU with nvJPEG."""

from __future__ import annotations

import concurrent.futures as cf
import io
import threading

import httpx
import numpy as np
import pytest
import uvicorn

from servelab.config import Settings
from servelab.data import synthetic_photo
from servelab.model.preprocess import preprocess_batch
from servelab.netutil import free_port
from servelab.service.app import create_app
from servelab.service.process import wait_until
from tests.conftest import cosine
from tests.unit.test_engine_parts import STANDIN, TORCHVISION_CPU, pil_jpeg_decoder

JPEG = {"Content-Type": "image/jpeg"}


class Served:
    """create_app(settings, embedder) under a real uvicorn on a free loopback port, in a background thread."""

    def __init__(self, settings: Settings, embedder=None):
        self.url = f"http://127.0.0.1:{(port := free_port())}"
        config = uvicorn.Config(create_app(settings, embedder), host="127.0.0.1", port=port, log_level="warning",
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        assert wait_until(lambda: self._settled(), timeout=120), "service did not start"
        return self

    def _settled(self) -> bool:
        try:
            r = httpx.get(self.url + "/healthz", timeout=2)
            return r.status_code == 500 or httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def info(self) -> dict:
        return httpx.get(self.url + "/info").json()

    def embed(self, body: bytes, headers=JPEG) -> httpx.Response:
        return httpx.post(self.url + "/embed", content=body, headers=headers, timeout=120)


def _settings(**kw) -> Settings:
    return Settings.from_env(**{**dict(engine="torch", provider="cpu", max_batch=8, max_delay_ms=20, warmup_iters=1,
                                       max_wait_ms=0, always_admit=64), **kw})


@pytest.fixture(scope="module")
def engine():
    from servelab.model.engines import TorchEmbedder

    return TorchEmbedder(_settings(), jpeg_decoder=pil_jpeg_decoder, decoder_name=STANDIN)


@pytest.fixture(scope="module")
def reference(engine, photos) -> np.ndarray:
    return engine.embed(preprocess_batch(photos))


@pytest.fixture(scope="module")
def on_device(engine):
    with Served(_settings(decode="device"), engine) as srv:
        yield srv


def _embeddings(r: httpx.Response) -> np.ndarray:
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["embeddings"], dtype=np.float32)


def test_jpegs_decoded_on_the_device_match_the_pil_path(on_device, photos, reference):
    """Each photo its own request, all at once (the batcher may put them in one decode), and all in one multipart
    request: every embedding at cosine >= 0.999 to the CPU path's, and every image counted as decoded on the device."""
    info = on_device.info()["decode"]
    assert info["setting"] == "device" and info["in_force"] == "device" and STANDIN in info["why"]
    before = info["images"]
    with cf.ThreadPoolExecutor(len(photos)) as pool:
        singles = np.concatenate([_embeddings(r) for r in pool.map(on_device.embed, photos)])
    files = [("file", (f"{i}.jpg", p, "image/jpeg")) for i, p in enumerate(photos)]
    together = _embeddings(httpx.post(on_device.url + "/embed", files=files, timeout=120))
    assert cosine(singles, reference).min() >= 0.999
    assert cosine(together, reference).min() >= 0.999
    after = on_device.info()["decode"]["images"]
    assert after["device"] - before["device"] == 2 * len(photos) and after["cpu"] == before["cpu"]


def test_a_png_still_goes_through_the_cpu_path(on_device, engine):
    buf = io.BytesIO()
    synthetic_photo(0, (640, 480)).save(buf, format="PNG")
    png = buf.getvalue()
    before = on_device.info()["decode"]["images"]
    got = _embeddings(on_device.embed(png, {"Content-Type": "image/png"}))
    after = on_device.info()["decode"]["images"]
    assert after == {"device": before["device"], "cpu": before["cpu"] + 1}
    assert cosine(got, engine.embed(preprocess_batch([png]))).min() >= 0.9999


def test_a_corrupt_jpeg_gets_a_4xx_naming_the_problem_and_the_others_are_answered(on_device, photos, reference):
    truncated = photos[0][: len(photos[0]) // 3]  # its header intact: only decoding finds it broken
    with cf.ThreadPoolExecutor(3) as pool:
        bad, good, other = pool.map(on_device.embed, [truncated, photos[1], photos[2]])
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/json", bad.text
    error = bad.json()["error"]
    assert error["code"] == "corrupt" and error["message"].startswith("image 0: image data is corrupt or truncated")
    assert cosine(np.concatenate([_embeddings(good), _embeddings(other)]), reference[1:3]).min() >= 0.999
    files = [("file", ("a.jpg", photos[3], "image/jpeg")), ("file", ("b.jpg", truncated, "image/jpeg"))]
    r = httpx.post(on_device.url + "/embed", files=files, timeout=120)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("image 1: "), r.text
    assert on_device.embed(photos[3]).status_code == 200  # and it goes on serving


def test_a_truncated_jpeg_gets_the_same_400_body_decoded_on_the_device_or_on_the_cpu(on_device, engine, photos):
    truncated = photos[0][: len(photos[0]) // 3]
    files = [("file", ("a.jpg", photos[1], "image/jpeg")), ("file", ("b.jpg", truncated, "image/jpeg"))]
    with Served(_settings(decode="cpu"), engine) as on_cpu:
        answers = {name: (srv.embed(truncated), httpx.post(srv.url + "/embed", files=files, timeout=120))
                   for name, srv in (("device", on_device), ("cpu", on_cpu))}
        assert on_cpu.info()["decode"]["images"]["device"] == 0
    for device, cpu in zip(answers["device"], answers["cpu"], strict=True):
        assert device.status_code == cpu.status_code == 400, (device.text, cpu.text)
        assert device.json() == cpu.json()
        assert device.json()["error"]["code"] == "corrupt"


def test_decode_cpu_decodes_in_the_pool_and_auto_on_a_cpu_engine_too(engine, photos, reference):
    for setting, why in (("cpu", "the decode setting is cpu"), ("auto", "auto decodes on the device on cuda only")):
        with Served(_settings(decode=setting), engine) as srv:
            assert cosine(_embeddings(srv.embed(photos[0])), reference[:1]).min() >= 0.999
            info = srv.info()["decode"]
        assert info["in_force"] == "cpu" and why in info["why"] and info["images"] == {"device": 0, "cpu": 1}


def test_decode_on_the_device_needs_an_engine_that_can(tmp_path):
    """On an engine with no device decoder the load fails, and /healthz says why (never a silent CPU decode)."""
    settings = Settings.from_env(engine="emulated", device_profile="flat", device_dir=tmp_path, decode="device",
                                 warmup_iters=1)
    with Served(settings) as srv:
        r = httpx.get(srv.url + "/healthz")
    assert r.status_code == 500 and "decode on the device needs the torch engine" in r.json()["error"]


@pytest.mark.skipif(TORCHVISION_CPU is not None,
                    reason=f"torchvision's decode_jpeg cannot run on the CPU here: {TORCHVISION_CPU}")
def test_torchvisions_own_decoder_on_the_cpu_serves_the_same_embeddings(photos, reference):
    with Served(_settings(decode="device")) as srv:
        assert srv.info()["decode"]["in_force"] == "device"
        assert cosine(_embeddings(srv.embed(photos[0])), reference[:1]).min() >= 0.999


def test_without_torchvisions_decoder_decode_device_fails_the_load_naming_it():
    """Where torchvision's decode_jpeg cannot run, `device` refuses to start the engine rather than decode
    elsewhere; where it can, the test above serves with it."""
    if TORCHVISION_CPU is None:
        pytest.skip("torchvision's decode_jpeg runs on the CPU here: nothing to refuse")
    with Served(_settings(decode="device")) as srv:
        r = httpx.get(srv.url + "/healthz")
    assert r.status_code == 500 and "torchvision decode_jpeg on cpu cannot run here" in r.json()["error"]
