"""Make `import torchvision` (hence `import open_clip`) work next to a CPU-only torch.

The registry's torchvision 0.28.0 is a CUDA build whose compiled `_C` cannot load against CPU torch; importing
it then fails with `operator torchvision::nms does not exist`. Users with matching builds never see this.
We try to load the real library first; only if that fails do we register schema-only placeholders for the two
ops torchvision's Python code references at import time. Transforms, models and open_clip then work; the
compiled ops (nms, roi_*) stay unavailable, and calling them raises.
"""

from __future__ import annotations

import importlib.util
import os

_done = False
_placeholder_lib = None  # keep the Library object alive


def ensure_torchvision_importable() -> None:
    global _done, _placeholder_lib
    if _done:
        return
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        _done = True
        return
    pkg_dir = list(spec.submodule_search_locations)[0]
    so = next((os.path.join(pkg_dir, f) for f in os.listdir(pkg_dir) if f.startswith("_C") and f.endswith(".so")), None)
    loaded = False
    if so:
        try:
            torch.ops.load_library(so)
            loaded = True
        except (OSError, RuntimeError):
            loaded = False
    if not loaded:
        try:
            lib = torch.library.Library("torchvision", "FRAGMENT")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _placeholder_lib = lib
        except RuntimeError:
            pass  # already defined (real library or an earlier call)
    _done = True
