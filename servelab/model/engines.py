"""Engines behind one interface: float32 [N, 3, 224, 224] in, L2-normalised float32 [N, 512] out.

`torch` runs the PyTorch module; `onnx` and `onnx-int8` run the exported graphs in ONNX Runtime on the chosen
execution provider (cpu, cuda, tensorrt). A provider that is not available is an error, never a silent CPU
fallback: numbers measured on the wrong device would be a lie.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from pathlib import Path

import numpy as np

from servelab.config import Settings
from servelab.errors import InvalidValue
from servelab.fileio import file_digest
from servelab.fingerprint import usable_cores
from servelab.model.contract import EMBED_DIM, INPUT_SHAPE
from servelab.model.preprocess import engine_batch
from servelab.model.providers import (  # noqa: F401  (the provider names and checks engines are built with)
    CUDA_OPTIONS,
    EngineError,
    check_active_provider,
    ort_providers,
    provider_name,
)
from servelab.vocabulary import ONNX_ENGINES, Engine, Precision, Provider

GPU_HOST_THREADS = 2  # an engine's CPU threads when a GPU computes (unless SERVELAB_THREADS says otherwise)


class Embedder:
    engine: str = ""
    provider: str = Provider.CPU
    weights: str = ""
    threads: int = 0
    precision: str = Precision.FP32  # torch may run fp16 / bf16; the ONNX engines run the fp32 export

    def embed(self, batch: np.ndarray) -> np.ndarray:
        batch = engine_batch(batch)
        if batch.shape[0] == 0:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        out = self._run(batch)
        return np.asarray(out, dtype=np.float32)

    def _run(self, batch: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def info(self) -> dict:
        return {"engine": self.engine, "provider": self.provider, "weights": self.weights, "threads": self.threads,
                "precision": self.precision}


class TorchEmbedder(Embedder):
    """The PyTorch module on cpu or cuda. A server hands it a batch's requests as they came (`embed_parts`: float32
    tensors, uint8 pixels, JPEG files) and the batch is assembled on the device, never as one float32 array on the
    host: on cuda each array is copied into a pinned host buffer and from there to the GPU without blocking, and
    cast (uint8 pixels: normalised) on the GPU; JPEG files are decoded there by batched nvJPEG
    (servelab.model.gpu_decode), all the batch's files in one call. With settings.cuda_graphs the forward pass is
    one CUDA graph per batch bucket (1, 2, 4 … max_batch), captured when the engine is built, a batch padded to its
    bucket; off by default: each bucket holds its own activations on the GPU, and a graph only pays once the
    kernel launches (about 150 per pass) are what a batch waits for, which the lease measures first.

    `jpeg_decoder` (bytes list, device -> uint8 [3, H, W] tensors) replaces torchvision's decode_jpeg, named by
    `decoder_name`: where torchvision's image extension cannot load, a test gives PIL in its place, said so."""

    engine = Engine.TORCH

    def __init__(self, settings: Settings, jpeg_decoder=None, decoder_name: str | None = None):
        import torch

        from servelab.model.gpu_decode import decode_jpegs
        from servelab.model.providers import torch_cuda_check
        from servelab.model.torch_model import build_image_encoder

        if settings.provider not in (Provider.CPU, Provider.CUDA):
            raise EngineError(f"torch engine: provider {settings.provider!r} not available (torch runs on cpu or cuda)")
        if settings.provider == Provider.CUDA and not (check := torch_cuda_check()).usable:
            raise EngineError(f"torch engine: provider 'cuda' not available ({check.reason})")
        self.device = settings.provider
        self.on_gpu = settings.provider == Provider.CUDA
        if settings.threads > 0 or self.on_gpu:
            # on a GPU, torch's CPU threads only cast and copy: a few do, and an all-core OpenMP pool would spin after
            # every batch on the cores the frontend needs (the service's children also get OMP_WAIT_POLICY=PASSIVE)
            torch.set_num_threads(settings.threads or GPU_HOST_THREADS)
        self.threads = torch.get_num_threads()
        self.provider = settings.provider
        self.precision = settings.precision
        self.dtype = {Precision.FP32: torch.float32, Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}[settings.precision]
        self.module, self.weights = build_image_encoder(settings)
        self.module.to(self.device, dtype=self.dtype)
        self._torch = torch
        self._decode = jpeg_decoder or decode_jpegs
        self.decoder = decoder_name or f"torchvision decode_jpeg on {self.device}" + (" (nvJPEG)" if self.on_gpu else "")
        self._decoder_error: str | None = None
        self._decoder_checked = False
        self._lock = threading.Lock()  # one batch at a time: the pinned buffers and the graphs' inputs are shared
        self._pinned: dict = {}  # host dtype -> pinned [rows, 3, 224, 224] buffer (cuda)
        self.max_batch = settings.max_batch
        self._graphs: dict[int, tuple] = {}  # bucket -> (static input, graph, static output)
        if settings.cuda_graphs and self.on_gpu:
            with torch.inference_mode():
                for bucket in self.buckets():
                    static_x = torch.zeros((bucket, *INPUT_SHAPE), dtype=self.dtype, device=self.device)
                    graph, static_out = capture_cuda_graph(self.module, static_x)
                    self._graphs[bucket] = (static_x, graph, static_out)

    def buckets(self) -> list[int]:
        """The batch sizes a CUDA graph is captured for: powers of two up to max_batch, and max_batch itself."""
        sizes, b = [], 1
        while b < self.max_batch:
            sizes.append(b)
            b *= 2
        return [*sizes, self.max_batch]

    def decode_error(self) -> str | None:
        """Why JPEG files cannot be decoded on this engine's device (None: they can); checked once, on a tiny JPEG."""
        if not self._decoder_checked:
            from servelab.model.gpu_decode import decoder_check

            self._decoder_error, self._decoder_checked = decoder_check(self.device, self._decode), True
        return self._decoder_error

    def _run(self, batch):
        return self.embed_parts([batch])[0]

    def embed_parts(self, parts: list) -> list:
        """Each part's embeddings (float32 [n, 512]), or, for a part of JPEG files one of which does not decode, the
        ImageDecodeError naming it: the other parts of the batch are still computed. A part is a float32 [n, 3, 224,
        224] array (normalised), a uint8 one (pixels: normalised here, on the device) or gpu_decode.JpegImages."""
        from servelab.model.gpu_decode import JpegImages

        torch = self._torch
        sizes = [len(p) for p in parts]
        starts = np.cumsum([0, *sizes]).tolist()
        n = starts[-1]
        failed: dict[int, Exception] = {}
        with self._lock, torch.inference_mode():
            for p in parts:
                if not isinstance(p, JpegImages) and (p.ndim != 4 or tuple(p.shape[1:]) != INPUT_SHAPE):
                    raise InvalidValue(f"expected a batch of shape [N, 3, 224, 224], got {list(p.shape)}")
            graphed = self._graphs.get(next((b for b in self._graphs if b >= n), 0))
            lone = len(parts) == 1 and not self.on_gpu and isinstance(parts[0], np.ndarray) \
                and parts[0].dtype == np.float32 and self.dtype == torch.float32 and parts[0].flags.c_contiguous
            if graphed is not None:
                x = graphed[0]
            elif lone:  # on a CPU, a float32 request is the model's input as it is
                x = torch.from_numpy(parts[0])
            else:
                x = torch.empty((n, *INPUT_SHAPE), dtype=self.dtype, device=self.device)
            jpeg_parts = [i for i, p in enumerate(parts) if isinstance(p, JpegImages)]
            for i, p in enumerate(parts):
                if not isinstance(p, JpegImages) and not lone:
                    self._copy_in(p, x[starts[i] : starts[i + 1]], starts[i])
            if jpeg_parts:
                failed = self._decode_into(parts, jpeg_parts, starts, x)
            out = (self._replay(graphed, n) if graphed is not None else self.module(x[:n])).float().cpu().numpy()
        return [failed.get(i) or out[starts[i] : starts[i + 1]] for i in range(len(parts))]

    def _replay(self, graphed: tuple, n: int):
        graphed[1].replay()
        return graphed[2][:n]

    def _copy_in(self, array: np.ndarray, rows, offset: int) -> None:
        """One request's array into its rows of the device batch: on cuda through the pinned buffer (its rows from
        `offset`, so the parts' copies never share host memory while they are in flight), a non-blocking copy, and
        the cast (uint8: the normalisation) on the device."""
        from servelab.model.gpu_decode import normalise_into

        torch = self._torch
        host = torch.from_numpy(np.ascontiguousarray(array))
        if self.on_gpu:
            staging = self._pinned_rows(host.dtype, offset + len(array))[offset : offset + len(array)]
            staging.copy_(host)
            host = staging.to(self.device, non_blocking=True)
        if host.dtype == torch.uint8:
            normalise_into(host, rows)
        else:
            rows.copy_(host)  # float32 -> the engine's precision, on the device

    def _pinned_rows(self, dtype, rows: int):
        """The pinned host buffer for `dtype`, at least `rows` rows (reused batch after batch: the previous batch's
        copies are done once its embeddings came back, which waits for the device)."""
        buf = self._pinned.get(dtype)
        if buf is None or buf.shape[0] < rows:
            buf = self._torch.empty((max(rows, self.max_batch), *INPUT_SHAPE), dtype=dtype, pin_memory=True)
            self._pinned[dtype] = buf
        return buf

    def _decode_into(self, parts: list, jpeg_parts: list[int], starts: list[int], x) -> dict[int, Exception]:
        """The JPEG parts decoded on the device, all their files in one batched call, into their rows of `x`. A file
        that fails the batch: each part is then decoded on its own, and the parts that fail get the error."""
        from servelab.model.gpu_decode import pixels_into

        blobs = [b for i in jpeg_parts for b in parts[i].blobs]
        together = jpeg_parts == list(range(len(jpeg_parts)))  # the JPEG parts are the batch's first rows
        try:
            images = self._decode(blobs, device=self.device)
        except Exception:
            return self._decode_each(parts, jpeg_parts, starts, x)
        if together:
            pixels_into(images, x[: len(blobs)])
            return {}
        done = self._torch.empty((len(blobs), *INPUT_SHAPE), dtype=self.dtype, device=self.device)
        pixels_into(images, done)
        at = 0
        for i in jpeg_parts:
            x[starts[i] : starts[i + 1]] = done[at : at + len(parts[i])]
            at += len(parts[i])
        return {}

    def _decode_each(self, parts: list, jpeg_parts: list[int], starts: list[int], x) -> dict[int, Exception]:
        """The JPEG parts decoded one file at a time, after a batched call failed. A file the device decoder refuses
        is decoded on the CPU, as the service's decode pool would (servelab.model.preprocess.preprocess_bytes): it is
        served from there if it decodes, and otherwise its part fails with the CPU path's own error
        (`image_error`), so a corrupt file gets the same answer wherever it was decoded."""
        from servelab.model.gpu_decode import pixels_into
        from servelab.model.preprocess import ImageDecodeError, image_error, preprocess_bytes

        torch = self._torch
        failed: dict[int, Exception] = {}
        for i in jpeg_parts:
            for k, blob in enumerate(parts[i].blobs):
                row = x[starts[i] + k : starts[i] + k + 1]
                try:
                    pixels_into(self._decode([blob], device=self.device), row)
                    continue
                except Exception:  # the device decoder's refusal: the CPU decoder says whether and why
                    pass
                try:
                    # the service's limits were checked on the file's header before it was queued for the device
                    row.copy_(torch.from_numpy(preprocess_bytes(blob, max_bytes=len(blob), max_pixels=2**62)))
                except ImageDecodeError as exc:
                    failed[i] = image_error(k, exc)
                    break
            if i in failed:  # its rows are computed and dropped: zeros, not whatever the memory held
                x[starts[i] : starts[i + 1]].zero_()
        return failed

    def info(self) -> dict:
        return {**super().info(), "decoder": self.decoder,
                "host_buffers": "pinned, copied without blocking" if self.on_gpu else "numpy arrays as they came",
                "cuda_graphs": sorted(self._graphs) or None}


def capture_cuda_graph(module, static_x):
    """The forward pass on `static_x` as one CUDA graph and its static output, captured after three warm-up passes
    on a side stream (as torch.cuda.graphs asks: the allocator and cuBLAS settle before capture). Replay the graph
    after writing a batch into `static_x`; the output tensor then holds its embeddings."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            module(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = module(static_x)
    return graph, static_out


class OrtEmbedder(Embedder):
    def __init__(self, model_path: Path, settings: Settings, weights: str, engine: str = Engine.ONNX):
        import onnxruntime as ort

        self.engine = engine
        self.provider = settings.provider
        self.weights = weights
        self.model_path = Path(model_path)
        sha = file_digest(self.model_path) if settings.provider == Provider.TENSORRT else ""  # names the engine cache
        providers = ort_providers(settings.provider, model_sha256=sha)
        wanted = provider_name(providers[0])
        available = ort.get_available_providers()
        if wanted not in available:
            raise EngineError(
                f"ONNX Runtime provider {wanted} is not available here (available: {', '.join(available)}); "
                "install onnxruntime-gpu on a GPU node or choose provider cpu"
            )
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ONNX Runtime's own default counts every core of the machine, not the ones this process may use (a
        # container's cpuset, `taskset`): on 2 of 16 cores it would start 16 threads that take turns on 2
        self.threads = settings.threads or (usable_cores() if settings.provider == Provider.CPU else GPU_HOST_THREADS)
        so.intra_op_num_threads = self.threads
        if settings.provider != Provider.CPU:
            # on a GPU the intra-op threads only run the odd CPU operator; spinning, they would wait for work after
            # every run on cores the frontend needs to read bodies and answer
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(self.model_path), sess_options=so, providers=providers)
        except Exception as exc:  # e.g. the CUDA provider's libraries or device missing
            raise EngineError(f"ONNX Runtime cannot create a session on {wanted} here: {exc}") from exc
        self.active_providers = self.session.get_providers()
        check_active_provider(wanted, self.active_providers)
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        # one run at a time keeps intra-op threads from oversubscribing; a single-thread session runs each call on
        # its caller's thread alone, so calls from threads on different cores share it (EngineInstances)
        self._lock = threading.Lock() if self.threads != 1 else contextlib.nullcontext()
        if settings.provider != Provider.CPU:
            self._first_run(wanted)

    def _first_run(self, wanted: str) -> None:
        """A GPU provider can initialise and still fail on the first run (no usable device, out of memory, a
        kernel missing for this GPU): the engine runs once here, so that failure refuses the engine instead of
        the first request."""
        try:
            self._run(np.zeros((1, *INPUT_SHAPE), dtype=np.float32))
        except Exception as exc:
            raise EngineError(f"ONNX Runtime created a session on {wanted} but cannot run the model: {exc}") from exc

    def _run(self, batch):
        with self._lock:
            return self.session.run([self.output_name], {self.input_name: batch})[0]

    def info(self) -> dict:
        return {**super().info(), "onnx": str(self.model_path), "active_providers": self.active_providers}


class EngineInstances(Embedder):
    """Several engine instances on a CPU, each on its share of the cores, running batches side by side; a batch
    that finds the engine idle, with no other batch waiting, runs on all cores at once instead.

    Why: ONNX Runtime's threads split every operator of one run between the cores and meet after each one, a
    few hundred times per image, so a core that another thread takes for a moment (the service's decoding) stalls
    all of them. Instances on separate cores never wait for each other. On a 2-core EPYC with a JPEG decode
    running beside them, two single-thread instances with 4 images each embedded 21.5 images/s where one
    two-thread run of 8 did 17.6-18.4. But one image takes 88 ms on one thread and 52 ms on two: a request on
    its own (one client) keeps all the threads. Once a batch has had to wait for such a run, requests are
    overlapping, and batches run on the instances until the engine is idle again. Like Triton's instance groups
    (instances × threads = cores, notebook 06b), the server runs `parallel_runs` batches at once
    (MicroBatcher.parallel). Single-thread instances share one session (its calls run on their callers'
    threads), so memory holds the model twice, not once per instance.
    """

    def __init__(self, whole: Embedder, instances: list[Embedder]):
        self.whole, self.parallel_runs = whole, len(instances)
        self.engine, self.provider, self.weights = whole.engine, whole.provider, whole.weights
        self.threads, self.precision = whole.threads, whole.precision
        self.threads_each = instances[0].threads
        self._free: queue.SimpleQueue[Embedder] = queue.SimpleQueue()  # the instances not running a batch
        for instance in instances:
            self._free.put(instance)
        for instance in {id(i): i for i in instances}.values():  # a session's first run allocates: not a request's
            instance.embed(np.zeros((1, *INPUT_SHAPE), dtype=np.float32))
        self._turn = threading.Condition()
        self._running = 0
        self._all_cores = False  # a run on all cores is in progress: it has them to itself
        self.runs = {"all_cores": 0, "one_instance": 0}  # batches run each way (the service's /info shows them)
        self._last = threading.local()  # how the calling thread's last batch ran

    def ran_on_an_instance(self) -> bool:
        """Whether the calling thread's last batch ran on one instance (beside others), not alone on all cores:
        the two take different times, and a server that learns what a batch costs must know which it timed."""
        return getattr(self._last, "on_instance", False)

    def _run(self, batch):
        with self._turn:
            waited = self._all_cores
            self._turn.wait_for(lambda: not self._all_cores)
            all_cores = self._running == 0 and not waited
            self._running += 1
            self._all_cores = all_cores
            self.runs["all_cores" if all_cores else "one_instance"] += 1
        self._last.on_instance = not all_cores
        try:
            if all_cores:
                return self.whole._run(batch)
            instance = self._free.get()  # the server runs at most parallel_runs batches: one is free
            try:
                return instance._run(batch)
            finally:
                self._free.put(instance)
        finally:
            with self._turn:
                self._running -= 1
                self._all_cores = False
                self._turn.notify_all()

    def info(self) -> dict:
        return {**self.whole.info(), "instances": {
            "count": self.parallel_runs, "threads_each": self.threads_each, "batches_run": dict(self.runs),
            "note": f"{self.parallel_runs} instances of {self.threads_each} thread(s) run batches side by side; "
                    f"a batch that finds the engine idle runs on all {self.whole.threads} threads"}}


def make_embedder(settings: Settings | None = None, *, instances: int = 1, **overrides) -> Embedder:
    """Build the engine the settings name; exports the ONNX model first if it is missing. `instances` > 1: an
    ONNX engine on a CPU of several cores, using all of them, becomes EngineInstances, each instance on
    cores ÷ instances threads. That is a server's choice, as Triton's instance groups are: another server given
    this engine runs it as one session on all cores."""
    settings = (settings or Settings.from_env()).with_(**{k: v for k, v in overrides.items() if v is not None})
    settings.validate()
    cores = usable_cores()
    n = min(instances, cores)
    if n > 1 and settings.engine in ONNX_ENGINES and settings.provider == Provider.CPU and not settings.threads:
        threads = cores // n
        if threads == 1:
            members = [make_embedder(settings, threads=1)] * n  # one session, n callers
        else:
            members = [make_embedder(settings, threads=threads) for _ in range(n)]
        return EngineInstances(make_embedder(settings), members)
    if settings.engine == Engine.TORCH:
        return TorchEmbedder(settings)
    if settings.engine == Engine.EMULATED:  # no model: an emulated accelerator (servelab.model.emulated_engine)
        from servelab.model.emulated_engine import EmulatedEmbedder

        return EmulatedEmbedder(settings)
    from servelab.model.export import ensure_exported

    meta = ensure_exported(settings)
    if settings.engine == Engine.ONNX:
        return OrtEmbedder(Path(meta["path"]), settings, meta["weights"], engine=Engine.ONNX)
    return OrtEmbedder(Path(meta["int8"]["path"]), settings, meta["weights"], engine=Engine.ONNX_INT8)
