"""Make ``import torchvision`` work against a CPU-only torch (needed by timm / transformers vision).

The registry's only torchvision 0.28 wheel is a CUDA build; against the CPU torch its import fails
with ``operator torchvision::nms does not exist``. ``scripts/bootstrap.sh`` installs an import hook
for that; this is the same fix applied lazily, for a venv built without the hook. It acts only after
the plain import has failed with exactly that error, so a working torchvision is never touched.
"""
from __future__ import annotations

import sys

_LIB = None


def ensure_torchvision() -> None:
    """Import torchvision, registering the two missing op schemas if (and only if) that is needed."""
    global _LIB
    try:
        import torchvision  # noqa: F401
        return
    except RuntimeError as err:
        if "torchvision::" not in str(err):
            raise
    import torch

    for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[key]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    _LIB = lib  # the schemas live as long as this object
    import torchvision  # noqa: F401,F811
