"""The GPU image (requirements-gpu.txt) provides every third-party module servelab imports at module level, so
the node's service, prepare step and Jupyter/papermill runs do not die on an ImportError another engineer's new
import introduced. Static scan (ast) of module-level imports; lazy imports inside functions are optional paths."""

from __future__ import annotations

import ast
import re
import sys

from tests.deploy.conftest import REPO_ROOT

# import name -> distribution that provides it (directly or as a dependency of a listed one)
PROVIDED_BY = {
    "PIL": "pillow", "yaml": "pyyaml", "google": "protobuf", "open_clip": "open-clip-torch", "faiss": "faiss-cpu",
    "prometheus_client": "prometheus-client", "multipart": "python-multipart", "onnxruntime": "onnxruntime-gpu",
    "pynvml": "nvidia-ml-py", "litserve": "litserve", "tritonclient": "tritonclient", "imagehash": "imagehash",
    "starlette": "fastapi", "pydantic": "fastapi", "nbformat": "papermill", "nbclient": "papermill",
    "click": "typer", "jupytext": "jupytext", "papermill": "papermill",
}
# only used by the laptop path (embedded tritonserver from the pytriton wheel; browser tests)
LAPTOP_ONLY = {"pytriton", "playwright"}


def module_level_imports(path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in tree.body:
        nodes = [node]
        if isinstance(node, (ast.If, ast.Try)):
            nodes = list(ast.walk(node))
        for n in nodes:
            if isinstance(n, ast.Import):
                names |= {a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names.add(n.module.split(".")[0])
    return names


def gpu_distributions() -> set[str]:
    out = set()
    for line in (REPO_ROOT / "requirements-gpu.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            out.add(re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower().replace("_", "-"))
    return out


def test_gpu_image_provides_servelab_imports():
    dists = gpu_distributions()
    stdlib = set(sys.stdlib_module_names)
    missing = {}
    for path in (REPO_ROOT / "servelab").rglob("*.py"):
        for name in module_level_imports(path) - stdlib - {"servelab", "__future__"} - LAPTOP_ONLY:
            dist = PROVIDED_BY.get(name, name.lower().replace("_", "-"))
            if dist not in dists:
                missing.setdefault(name, []).append(str(path.relative_to(REPO_ROOT)))
    assert not missing, f"module-level imports not provided by requirements-gpu.txt: {missing}"


def test_scan_sees_imports():
    names = module_level_imports(REPO_ROOT / "servelab" / "service" / "app.py")
    assert {"fastapi", "numpy", "prometheus_client"} <= names
