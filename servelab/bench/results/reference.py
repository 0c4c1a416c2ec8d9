"""The GPU reference figures a notebook shows beside its own headline: measured once on a GPU, committed under
reference/<gpu>/, never this run's numbers.

    from servelab.bench.results.reference import reference_line
    reference_line("03")   # "NVIDIA H100 80GB HBM3, 2026-11-26 (reference/nvidia-h100-80gb-hbm3): …" or None

Each sentence is built from that run's records, so a new reference run changes the figures without code; the
label names the card, the date and the folder, so nobody takes it for a figure of the machine at hand.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from servelab.bench.results.records import load_records

ROOT = Path(__file__).resolve().parents[3] / "reference"


def _best(records: list[dict], **match) -> dict | None:
    rows = [r for r in records if r.get("kind") in ("raw", "load") and r.get("available", True)
            and (r.get("throughput_img_s") or 0) > 0 and (r.get("errors") or 0) == 0
            and all(r.get(k) == v for k, v in match.items())]
    return max(rows, key=lambda r: r["throughput_img_s"]) if rows else None


def _at(records: list[dict], **match) -> dict | None:
    rows = [r for r in records if all(r.get(k) == v for k, v in match.items()) and (r.get("errors") or 0) == 0]
    return rows[0] if rows else None


def _img_s(r: dict | None) -> str:
    return f"{r['throughput_img_s']:,.0f} img/s" if r else "not measured"


def _sentences(records: list[dict]) -> dict[str, str]:
    """{notebook id: what the reference run measured for that notebook's question}."""
    eager = _best(records, experiment="gpu-raw", variant="eager")
    graph1 = _at(records, experiment="gpu-raw", variant="cuda-graph", batch=1)
    eager1 = _at(records, experiment="gpu-raw", variant="eager", batch=1, precision=(eager or {}).get("precision"))
    host = _best(records, experiment="gpu-raw-host", engine="torch")
    ort = _best(records, experiment="gpu-raw-host", engine="onnx")
    ort1 = _at(records, experiment="gpu-raw-host", engine="onnx", batch=1)
    served = {(p, c): _at(records, experiment="gpu-served", server="fastapi", payload=p, concurrency=c)
              for p in ("tensor", "jpeg") for c in (1, 128)}
    triton = _best(records, experiment="gpu-served", server="triton-grpc")
    decode = {r["backend"]: r for r in records if r.get("experiment") == "gpu-decode"}
    nvjpeg = next((r for b, r in decode.items() if b.startswith("gpu")), None)
    pil = next((r for b, r in decode.items() if b.startswith("cpu")), None)
    parity = {r["precision"]: r["value"] for r in records if r.get("experiment") == "gpu-precision"}

    engine = (f"the torch engine {_img_s(eager)} ({eager['precision']}, batch {eager['batch']}, input already on the "
              f"GPU), {_img_s(host)} fed from host memory at batch {host['batch']}" if eager and host else "")
    busy = [r.get("gpu_util_pct") for r in served.values() if r and r.get("gpu_util_pct") is not None]
    service = (f"the FastAPI service served {_img_s(served['tensor', 1])} to 1 client and "
               f"{_img_s(served['tensor', 128])} to 128 (tensor-in), {_img_s(served['jpeg', 128])} JPEG-in"
               + (f", the GPU busy {min(busy):.0f}–{max(busy):.0f} % of the time" if busy else "")
               if served["tensor", 128] else "")
    triton_s = (f"Triton served {_img_s(triton)}" if triton else
                "Triton on the GPU was not measured in that run (its README says why)")
    out = {
        "01": service,
        "03": "; ".join(x for x in (
            engine,
            f"ONNX Runtime's CUDA provider {_img_s(ort)} at batch {ort['batch']} (fp32)" if ort else "",
            (f"fp16 and bf16 kept a cosine of {parity.get('fp16', 0):.6f} and {parity.get('bf16', 0):.6f} against fp32"
             if parity else "")) if x),
        "04": "; ".join(x for x in (
            (f"one image took {1000 / eager1['throughput_img_s']:.1f} ms and {eager['batch']} took "
             f"{1000 * eager['batch'] / eager['throughput_img_s']:.1f} ms on the GPU, so a batch costs little more "
             "than one image there" if eager and eager1 else ""),
            triton_s) if x),
        "05a": (f"ONNX Runtime's CUDA provider {_img_s(ort1)} at batch 1 and {_img_s(ort)} at batch {ort['batch']}"
                if ort and ort1 else ""),
        "06a": "; ".join(x for x in (service, triton_s) if x),
        "06b": (f"the engine alone at batch 1 took {1000 / eager1['throughput_img_s']:.1f} ms eager and "
                f"{1000 / graph1['throughput_img_s']:.2f} ms as one CUDA graph: at small batches the GPU waits on "
                "kernel launches (instance counts were not measured there)"
                if eager1 and graph1 else ""),
        "09": (f"decoding and resizing photos took {_img_s(nvjpeg)} with nvJPEG on the GPU against {_img_s(pil)} "
               f"with PIL on {pil['backend'].split(',')[-1].strip(' )')}" if nvjpeg and pil else ""),
    }
    return {k: v for k, v in out.items() if v}


@cache
def _references(root: str) -> list[tuple[str, dict[str, str]]]:
    """(label, sentences) per reference run under `root`, newest first."""
    found = []
    for d in sorted(Path(root).glob("*/records.jsonl")):
        env_path = d.parent / "environment.json"
        env = json.loads(env_path.read_text()) if env_path.is_file() else {}
        gpus = ", ".join(g.get("name", "?") for g in env.get("gpus") or [] if isinstance(g, dict)) or d.parent.name
        date = (env.get("captured") or "")[:10]
        label = f"{gpus}, {date}, {env.get('weights') or 'weights unrecorded'} (reference/{d.parent.name})"
        found.append((date, label, _sentences(load_records(d.parent))))
    return [(label, s) for _, label, s in sorted(found, reverse=True)]


def reference_line(notebook_id: str, root: Path | str = ROOT) -> str | None:
    """The newest reference run's figures for this notebook, labelled; None where none was measured."""
    for label, sentences in _references(str(root)):
        if notebook_id in sentences:
            return f"{label}: {sentences[notebook_id]}."
    return None
