"""Import hook that lets the registry's CUDA torchvision import against a CPU torch.

The only torchvision 0.28 wheel on the registry is a CUDA build; with the CPU torch its
import fails with ``operator torchvision::nms does not exist`` because the compiled ops
library is not loaded. Registering the two op *schemas* (no kernels) before torchvision's
``_meta_registrations`` runs is enough for the import, which is all timm/open_clip/
transformers need. Installed as a ``.pth`` file by ``scripts/bootstrap.sh`` only where
the plain import fails; it never activates otherwise.
"""
import importlib.abc
import sys

_LIB = None


class _TorchvisionSchemaFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        global _LIB
        if fullname != "torchvision" or _LIB is not None:
            return None
        try:
            import torch

            lib = torch.library.Library("torchvision", "DEF")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
            _LIB = lib  # keep a reference: the schemas live as long as the Library object
        except Exception:  # already defined (real ops present) or torch missing
            _LIB = False
        return None  # let the normal finders import torchvision


if not any(isinstance(f, _TorchvisionSchemaFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _TorchvisionSchemaFinder())
