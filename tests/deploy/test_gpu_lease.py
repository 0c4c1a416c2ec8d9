"""scripts/gpu_reference.sh's lease half, run for real in a scratch folder (no GPU, no network): each call's part
installs what it completes; onnxruntime-gpu comes together from chunks spread over parts, checked against the
manifest; Triton's stub gets an environment of its own whose numpy comes before the machine's."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_reference.sh"


def _wheel(folder: Path, name: str, version: str, body: str) -> None:
    """A minimal pure-Python wheel: one module and its dist-info."""
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}/__init__.py", body)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")


def _parts(tmp: Path) -> Path:
    """part-1: a wheel, numpy 1 (for the stub) and the first chunk; part-2: the second chunk."""
    lease = tmp / "build" / "gpu-lease"
    p1, p2 = lease / "part-1", lease / "part-2"
    for p in (p1, p2):
        p.mkdir(parents=True)
    _wheel(p1, "leasecheck", "1.0", "WHERE = 'shipped'\n")
    _wheel(p1, "numpy", "1.26.4", "__version__ = '1.26.4'\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        data = b"__version__ = '1.31.1-gpu'\n" + b"# padding\n" * 5000
        info = tarfile.TarInfo("onnxruntime/__init__.py")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    half = len(blob) // 2
    (p1 / "ort-gpu.tar.xz.chunk-000").write_bytes(blob[:half])
    (p2 / "ort-gpu.tar.xz.chunk-001").write_bytes(blob[half:])
    manifest = f"{hashlib.sha256(blob).hexdigest()}  ort-gpu.tar.xz\nchunks 2\n"
    for p in (p1, p2):
        (p / "MANIFEST").write_text(manifest)
    return lease


def _checkout(tmp: Path) -> Path:
    """A scratch checkout: the script, and the parts it finds beside it under build/gpu-lease."""
    (tmp / "scripts").mkdir()
    copy = tmp / "scripts" / "gpu_reference.sh"
    copy.write_text(SCRIPT.read_text())
    _parts(tmp)
    return copy


def _run(script: Path, *args: str) -> subprocess.CompletedProcess:
    tmp = script.parent.parent
    env = {**os.environ, "GPU_LEASE_TMP": str(tmp / "there"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}  # python3: this one, with pip
    env.pop("PYTHONPATH", None)
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=300)


def _stub(there: Path, code: str) -> subprocess.CompletedProcess:
    """What Triton's stub would import: its interpreter, without PYTHONPATH (which the stub ignores)."""
    return subprocess.run([str(there / "gpu-stub" / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


def test_each_part_installs_what_it_completes_and_the_stub_gets_its_own_numpy(tmp_path):
    script, there = _checkout(tmp_path), tmp_path / "there"
    first = _run(script, "lease-install", "build/gpu-lease/part-1")
    assert first.returncode == 0, first.stderr
    assert "onnxruntime-gpu 1/2 chunks" in first.stderr and "the stub's numpy 1.26.4" in first.stderr
    assert (there / "gpu-site" / "leasecheck" / "__init__.py").is_file()
    assert not (there / "gpu-site" / "numpy").exists()  # numpy 1 is the stub's alone
    assert not (there / "gpu-ort").exists()

    second = _run(script, "lease-install", "build/gpu-lease/part-2")
    assert second.returncode == 0, second.stderr
    assert "onnxruntime-gpu ready" in second.stderr
    seen = _stub(there, "import numpy, onnxruntime; print(numpy.__version__, onnxruntime.__version__)")
    assert seen.stdout.split() == ["1.26.4", "1.31.1-gpu"], seen.stderr
    # the shipped site comes after the stub's own numpy (open_clip for the torch encoder), never ahead of it
    assert _stub(there, "import leasecheck, numpy; print(numpy.__version__)").stdout.split() == ["1.26.4"]

    exports = _run(script, "lease-env").stdout
    assert f"PYTHONPATH={there}/gpu-ort:{there}/gpu-site:" in exports
    assert f"SERVELAB_TRITON_PYTHON={there}/gpu-stub/bin/python" in exports


def test_a_damaged_chunk_is_refused(tmp_path):
    script = _checkout(tmp_path)
    chunk = tmp_path / "build" / "gpu-lease" / "part-2" / "ort-gpu.tar.xz.chunk-001"
    chunk.write_bytes(chunk.read_bytes()[:-1] + bytes([chunk.read_bytes()[-1] ^ 1]))
    assert _run(script, "lease-install", "build/gpu-lease/part-1").returncode == 0
    done = _run(script, "lease-install", "build/gpu-lease/part-2")
    assert done.returncode != 0 and "onnxruntime-gpu damaged in transit" in done.stderr
    assert not (tmp_path / "there" / "gpu-ort").exists()


def _call_folder(tmp: Path, n: int, wheels: dict[str, tuple[str, str]]) -> Path:
    """build/gpu-lease/call-N with these wheels ({name: (version, body)}) and their SHA256SUMS."""
    folder = tmp / "build" / "gpu-lease" / f"call-{n}"
    folder.mkdir(parents=True)
    for name, (version, body) in wheels.items():
        _wheel(folder, name, version, body)
    sums = "".join(f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}\n" for w in sorted(folder.glob("*.whl")))
    (folder / "SHA256SUMS").write_text(sums)
    return folder


def test_a_call_folder_is_checked_then_installed_without_onnxruntime_gpu(tmp_path):
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "gpu_reference.sh"
    script.write_text(SCRIPT.read_text())
    _call_folder(tmp_path, 1, {"leasecheck": ("1.0", "WHERE = 'call 1'\n"), "numpy": ("1.26.4", "__version__ = '1.26.4'\n")})
    done = _run(script, "lease-install", "build/gpu-lease/call-1")
    assert done.returncode == 0, done.stderr
    assert "onnxruntime-gpu not carried" in done.stderr and "the stub's numpy 1.26.4" in done.stderr
    there = tmp_path / "there"
    assert (there / "gpu-site" / "leasecheck" / "__init__.py").is_file()
    assert f"PATH={there}/gpu-site/bin:" in _run(script, "lease-env").stdout  # py-spy and perf_analyzer land there


def test_a_damaged_wheel_in_a_call_is_refused_before_anything_installs(tmp_path):
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "gpu_reference.sh"
    script.write_text(SCRIPT.read_text())
    folder = _call_folder(tmp_path, 2, {"leasecheck": ("1.0", "WHERE = 'call 2'\n")})
    wheel = next(folder.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"x")
    done = _run(script, "lease-install", "build/gpu-lease/call-2")
    assert done.returncode != 0 and "wheels damaged in transit" in done.stderr
    assert not (tmp_path / "there" / "gpu-site" / "leasecheck").exists()


def test_the_two_calls_put_nvidia_pytriton_in_the_second_and_refuse_a_call_that_would_not_travel(tmp_path):
    """The pack from a filled cache (no download): call 2 holds nvidia-pytriton alone; a call over 64 MiB with the
    working tree stops the pack."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "gpu_reference.sh"
    script.write_text(SCRIPT.read_text())
    cache = tmp_path / "build" / "gpu-lease" / "cache-calls"
    (cache / "wheels").mkdir(parents=True)
    (cache / "PINS").write_text("fastapi==0.165.0\n")
    for name in ("fastapi-0.165.0-py3-none-any.whl", "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl"):
        (cache / "wheels" / name).write_bytes(b"w" * 1024)
    done = _run(script, "lease-pack")
    assert done.returncode == 0, done.stderr
    lease = tmp_path / "build" / "gpu-lease"
    assert sorted(p.name for p in (lease / "call-2").iterdir()) == [
        "SHA256SUMS", "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl"]
    assert "fastapi-0.165.0-py3-none-any.whl" in {p.name for p in (lease / "call-1").iterdir()}
    with open(cache / "wheels" / "fastapi-0.165.0-py3-none-any.whl", "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB on paper
    over = _run(script, "lease-pack")
    assert over.returncode != 0 and "call-1 is over 64 MiB with the working tree" in over.stderr
