"""A feature classifier over frozen backbone features (the FPR paper's SP-Cars substitute).

:class:`FeatureClassifier` is a linear (``hidden=0``) or one-hidden-layer MLP classifier; its
``features(x)`` (the hidden ReLU layer, identity for a linear one) is what the ``classifier``
encoder of the registry embeds with. Training lives in :func:`nearid_lib.fpr.train_feature_classifier`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

from safetensors.torch import load_file, save_file
from torch import nn

from ..io_utils import atomic_write, write_json

__all__ = ["FeatureClassifier"]


class FeatureClassifier(nn.Module):
    """Linear (``hidden=0``) or one-hidden-layer MLP classifier over frozen features.

    ``features(x)`` = the penultimate representation (hidden ReLU layer; identity for linear)."""

    def __init__(self, in_dim: int, n_classes: int, hidden: int = 256, classes: Sequence[str] = ()):
        super().__init__()
        self.in_dim, self.n_classes, self.hidden = in_dim, n_classes, hidden
        self.classes = list(classes)
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU()) if hidden else nn.Identity()
        self.out = nn.Linear(hidden or in_dim, n_classes)

    def features(self, x):
        return self.body(x)

    def forward(self, x):
        return self.out(self.body(x))

    def fingerprint(self) -> str:
        h = hashlib.sha1()
        for k, v in sorted(self.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().float().numpy().tobytes())
        return h.hexdigest()

    def save(self, path, backbone: str = "efficientnet-lite0") -> Path:
        """``<path>.safetensors`` (weights) + ``<path>.json`` (shape, classes, backbone name)."""
        path = Path(path)
        atomic_write(path.with_suffix(".safetensors"),
                     lambda p: save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(p)))
        write_json({"in_dim": self.in_dim, "n_classes": self.n_classes, "hidden": self.hidden,
                    "classes": self.classes, "backbone": backbone}, path.with_suffix(".json"))
        return path.with_suffix(".safetensors")

    @staticmethod
    def load(path):
        """``(classifier, meta)`` from :meth:`save`'s ``.safetensors`` + ``.json`` pair."""
        path = Path(path)
        meta = json.loads(path.with_suffix(".json").read_text())
        clf = FeatureClassifier(meta["in_dim"], meta["n_classes"], meta["hidden"], meta.get("classes", ()))
        clf.load_state_dict(load_file(str(path.with_suffix(".safetensors"))))
        clf.eval()
        return clf, meta
