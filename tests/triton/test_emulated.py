"""The emulated accelerator in a real tritonserver: dynamic batching, queue delay, instances and devices pay as
they would in front of a GPU (the device waits, so the CPU is not the limit). Figures are throughput ratios of
short closed-loop runs of batch-1 requests over loopback HTTP, with wide margins."""

from __future__ import annotations

import pytest

from servelab.bench.load import LoadOpts, closed_loop
from servelab.bench.servers import attach
from servelab.model.device_profile import profile
from servelab.triton.control import config_dict, get_config, load_model
from servelab.triton.models import EMULATED_ENCODER
from servelab.triton.repository import stage
from servelab.triton.server import EmbeddedTriton
from servelab.triton.server_stats import read_stats

pytestmark = [pytest.mark.triton, pytest.mark.usefixtures("spare_cores")]

# windows of at least 5 p50s and 8 answers, three that agree within 20 % or four at most
OPTS = LoadOpts(min_requests=8, min_p50s=3.0, max_windows=4, tolerance=0.2, max_warmup_s=5.0)  # the device time is exact: a few p50s per window agree


@pytest.fixture(scope="session")  # under xdist, once per worker: the worker may run other files' tests between these
def emulated_triton(onnx_meta, settings, tmp_path_factory):
    root = tmp_path_factory.mktemp("emulated-triton")
    ours = settings.with_(device_profile="linear", device_dir=root / "devices")
    stage("cpu", root / "models", instances=1, settings=ours)
    with EmbeddedTriton(root / "models", log_path=root / "tritonserver.log", models=[EMULATED_ENCODER],
                        startup_timeout=240) as srv:
        yield srv


class AvgBatch:
    """A load-generator meter: the average batch Triton executed while the load was measured."""

    def __init__(self, http_url: str):
        self.http_url = http_url

    def start(self):
        self.before = read_stats(self.http_url, EMULATED_ENCODER)

    def stop(self) -> dict:
        return {"avg_batch": (read_stats(self.http_url, EMULATED_ENCODER) - self.before).avg_batch}


def _load(srv, *, device_profile: str, batching: bool = True, delay_us: int = 0, instances: int = 1,
          devices: int = 0, max_batch: int = 32) -> None:
    cfg = config_dict(get_config(srv.http_url, EMULATED_ENCODER))
    cfg["parameters"]["device_profile"] = {"string_value": device_profile}
    cfg["parameters"]["emulated_devices"] = {"string_value": str(devices)}
    cfg["instance_group"] = [{"kind": "KIND_CPU", "count": instances}]
    cfg["max_batch_size"] = max_batch
    if batching:
        cfg["dynamic_batching"] = {"max_queue_delay_microseconds": delay_us}
    else:
        cfg.pop("dynamic_batching", None)
    load_model(srv.http_url, EMULATED_ENCODER, cfg)


def _measure(srv, concurrency: int) -> dict:
    handle = attach("triton-http", srv.http_url, model=EMULATED_ENCODER)
    result = closed_loop(handle.worker_factory("tensor", 1), concurrency, OPTS, meters=[AvgBatch(srv.http_url)])
    summary = result.summary()
    assert summary["errors"] == 0, summary["error_examples"]
    return summary


def test_the_model_is_labelled_emulated(emulated_triton):
    cfg = get_config(emulated_triton.http_url, EMULATED_ENCODER)
    assert cfg["parameters"]["weights"]["string_value"] == "emulated linear"


def test_dynamic_batching_pays_several_times_and_a_queue_delay_fills_the_batches(emulated_triton):
    """Linear profile, t(B) = 40 ms + 1.5 ms·B, one instance, 8 clients, max_batch_size 8. Without a queue delay
    the clients split into two groups that take turns (each answered group resends while the other runs)."""
    _load(emulated_triton, device_profile="linear", batching=False)
    off = _measure(emulated_triton, 8)
    _load(emulated_triton, device_profile="linear", delay_us=0, max_batch=8)
    on = _measure(emulated_triton, 8)
    t1_us = int(profile("linear").t_s(1) * 1e6)
    _load(emulated_triton, device_profile="linear", delay_us=t1_us, max_batch=8)  # a full batch leaves at once
    delayed = _measure(emulated_triton, 8)
    figures = (f"off {off['throughput_img_s']:.1f} img/s (avg batch {off['avg_batch']}), on {on['throughput_img_s']:.1f} "
               f"(avg batch {on['avg_batch']}), delay {t1_us} us and max_batch 8 {delayed['throughput_img_s']:.1f} "
               f"(avg batch {delayed['avg_batch']})")
    print(figures)
    assert on["throughput_img_s"] >= 2.5 * off["throughput_img_s"], figures
    assert delayed["avg_batch"] >= 6, figures


def test_a_second_instance_helps_while_the_device_has_room_and_not_once_it_is_full(emulated_triton):
    """Flat profile, 168 ms for any batch up to 4 images: two instances overlap on one device. With room: 2 clients,
    dynamic batching off (with it, one instance could merge the two requests and the comparison would be about
    batching). Full: 8 clients, batches of 4 (max_batch_size 4) always waiting."""
    ratios = {}
    for label, concurrency, max_batch, batching in (("room", 2, 32, False), ("full", 8, 4, True)):
        figures = {}
        for instances in (1, 2):
            _load(emulated_triton, device_profile="flat", instances=instances, max_batch=max_batch,
                  batching=batching)
            figures[instances] = _measure(emulated_triton, concurrency)["throughput_img_s"]
        ratios[label] = figures[2] / figures[1]
        print(f"{label}: c={concurrency} max_batch {max_batch}: 1 instance {figures[1]:.1f}, 2 instances "
              f"{figures[2]:.1f} img/s ({ratios[label]:.2f}x)")
    assert ratios["room"] >= 1.6, ratios
    assert ratios["full"] <= 1.15, ratios


def test_two_devices_double_a_saturated_device(emulated_triton):
    """Two instances and 16 clients (full batches of 4 always waiting), on one device or on two."""
    figures, batches = {}, {}
    for devices in (1, 2):
        _load(emulated_triton, device_profile="flat", instances=2, devices=devices, max_batch=4)
        summary = _measure(emulated_triton, 16)
        figures[devices], batches[devices] = summary["throughput_img_s"], summary["avg_batch"]
    print(f"two instances, 16 clients, max_batch 4: 1 device {figures[1]:.1f} img/s (avg batch {batches[1]}), "
          f"2 devices {figures[2]:.1f} img/s (avg batch {batches[2]}): {figures[2] / figures[1]:.2f}x")
    assert figures[2] >= 1.6 * figures[1], figures
