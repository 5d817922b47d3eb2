"""Evaluation encoders of Finer-Personalization Rank and an on-disk embedding cache.

The general encoders come from :func:`nearid_lib.models.load_encoder` (``clip-vit-b32``,
``dinov2-base``, ``efficientnet-lite0`` = the frozen-GAP baseline, ``nearid`` = backbone + our
trained MAP head). This module registers the paper's specialised encoders with the same registry
(``register_encoder``, no change to the models package):

- ``bioclip2``: BioCLIP 2 through open_clip, hub id ``hf-hub:imageomics/bioclip-2`` (CUB). The
  loading path only; weights are never downloaded in ``smoke``/``mini``.
- ``miewid``: MiewID (``conservationxlabs/miewid-msv3``) through transformers ``AutoModel`` with
  ``trust_remote_code=True`` -- remote code runs only when the caller opts in
  (``allow_remote_code=True``, i.e. ``RetrievalConfig.allow_remote_code``); otherwise a clear error.
- ``classifier``: the pooled features of a fine-grained classifier (the paper's SP-Cars is an
  EfficientNetV2 trained on all of Stanford Cars). :func:`train_feature_classifier` trains a
  linear or one-hidden-layer MLP classifier on frozen backbone features; the encoder's pooled
  output is the classifier's penultimate features (the hidden layer; for a linear classifier, the
  backbone feature itself, so a linear probe changes nothing and we document it as a baseline).

Each encoder loads once per process (:func:`get_encoder` memoises) and embeds in batches.
Embeddings are cached as ``.npy`` under ``cache_dir(profile)/retrieval`` with the key
``sha1(encoder fingerprint | image-list hash | variant)``: the fingerprint is the encoder's
``cache_key()`` plus a hash of its trainable/random weights (a checkpoint hash for ``nearid``,
the parameters of a tiny random-init model), the image-list hash covers every file's *bytes*.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["get_encoder", "encoder_fingerprint", "image_list_hash", "EmbeddingCache", "embed_images",
           "remove_background", "train_feature_classifier", "ClassifierEncoder", "MIEWID_HUB_ID",
           "BIOCLIP2_HUB_ID", "RemoteCodeError", "clear_encoders"]

MIEWID_HUB_ID = "conservationxlabs/miewid-msv3"
BIOCLIP2_HUB_ID = "hf-hub:imageomics/bioclip-2"
# Grey that an ImageNet-normalised encoder sees as ~0: backgrounds "removed" become neutral.
BG_FILL = (124, 116, 104)


class RemoteCodeError(PermissionError):
    """An encoder needs ``trust_remote_code`` and the caller did not opt in."""


# ----------------------------------------------------------------------------- specialised encoders
def _register() -> None:
    import torch
    from torch import nn

    from ..models import register_encoder
    from ..models.backbones import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, Encoder, \
        EncoderOutput, Preprocess

    class OpenClipEncoder(Encoder):
        """open_clip image tower (BioCLIP 2); pooled = the image embedding, no tokens."""

        def __init__(self, name, hub_id, tiny=False, frozen=True, weights=None, **kw):
            import open_clip

            if tiny:
                # Random-init tiny ViT of open_clip's own class (offline), for tests only.
                cfg = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 2, "width": 32,
                                                       "patch_size": 8, "head_width": 16},
                       "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2,
                                    "layers": 1}}
                model = open_clip.CLIP(**cfg)
                size = 32
            else:
                model, _, _ = open_clip.create_model_and_transforms(weights or hub_id)
                size = model.visual.image_size
                size = size[0] if isinstance(size, (tuple, list)) else int(size)
            super().__init__(name, Preprocess(size, CLIP_MEAN, CLIP_STD, "shorter_crop", 1.0, "bicubic"),
                             tiny=tiny, frozen=frozen, weights="random" if tiny else (weights or hub_id))
            self.visual = model.visual
            self._finish()

        def _forward(self, pixel_values):
            return EncoderOutput(None, self.visual(pixel_values))

    class RemoteCodeEncoder(Encoder):
        """transformers ``AutoModel`` with remote code (MiewID): pooled = the model's output."""

        def __init__(self, name, hub_id, tiny=False, frozen=True, weights=None,
                     allow_remote_code=False, image_size=440, **kw):
            if not allow_remote_code:
                raise RemoteCodeError(
                    f"encoder {name!r} ({weights or hub_id}) runs code from the Hugging Face hub "
                    f"(trust_remote_code=True). Opt in explicitly: load_encoder({name!r}, "
                    f"allow_remote_code=True) or RetrievalConfig.allow_remote_code=True.")
            from transformers import AutoModel

            model = AutoModel.from_pretrained(weights or hub_id, trust_remote_code=True)
            super().__init__(name, Preprocess(image_size, IMAGENET_MEAN, IMAGENET_STD, "squash", 1.0,
                                              "bilinear"),
                             tiny=False, frozen=frozen, weights=weights or hub_id)
            self.model = model
            self._finish()

        def _forward(self, pixel_values):
            out = self.model(pixel_values)
            pooled = out if isinstance(out, torch.Tensor) else getattr(out, "pooler_output", out[0])
            return EncoderOutput(None, pooled)

    class _ClassifierEncoder(Encoder):
        """A frozen backbone + a trained feature classifier; pooled = the classifier's
        penultimate features."""

        def __init__(self, name, backbone: Encoder, classifier: nn.Module, source: str = "trained"):
            if classifier.in_dim != backbone.embed_dim:
                raise ValueError(f"classifier encoder: classifier takes {classifier.in_dim}-d features, "
                                 f"backbone {backbone.name!r} gives {backbone.embed_dim}-d")
            super().__init__(name, backbone.preprocess, tiny=backbone.tiny, frozen=True,
                             weights=f"{backbone.weights}+{source}")
            self.backbone, self.classifier = backbone, classifier
            self._finish()

        def _forward(self, pixel_values):
            out = self.backbone(pixel_values)
            return EncoderOutput(out.tokens, self.classifier.features(out.pooled.float()))

        def cache_key(self) -> str:
            return f"{self.name}|{self.backbone.cache_key()}"

    def _classifier(name, hub_id, tiny=False, checkpoint=None, backbone="efficientnet-lite0",
                    classifier=None, **kw):
        from ..models import load_encoder

        if classifier is None:
            if checkpoint is None:
                raise ValueError("classifier encoder: pass classifier= (from train_feature_classifier) "
                                 "or checkpoint= (a file saved with FeatureClassifier.save)")
            classifier, meta = FeatureClassifier.load(checkpoint)
            backbone = meta.get("backbone", backbone)
        bb, _ = load_encoder(backbone, tiny=tiny, **kw)
        return _ClassifierEncoder(name, bb, classifier, source=f"clf:{classifier.fingerprint()[:10]}")

    globals()["ClassifierEncoder"] = _ClassifierEncoder
    register_encoder("bioclip2", OpenClipEncoder, BIOCLIP2_HUB_ID, aliases=("bioclip-2", "bioclip"),
                     doc="BioCLIP 2 (open_clip), the paper's CUB specialist")
    register_encoder("miewid", RemoteCodeEncoder, MIEWID_HUB_ID, aliases=("miewid-msv3",),
                     doc="MiewID (remote code, opt-in), the paper's Re-ID specialist")
    register_encoder("classifier", _classifier, None, aliases=("sp-cars",),
                     doc="frozen backbone + trained feature classifier (SP-Cars substitute)")


ClassifierEncoder = None  # replaced by the class when the registry is first used
_REGISTERED = False
_POOL: dict[tuple, Any] = {}


def _ensure_registered() -> None:
    global _REGISTERED
    if not _REGISTERED:
        _register()
        _REGISTERED = True


def get_encoder(name: str, tiny: bool = False, device: str = "cpu", **kw: Any):
    """``(model, preprocess)`` via :func:`nearid_lib.models.load_encoder`, loaded once per process
    for the same ``(name, tiny, device, kwargs)``. ``allow_remote_code`` is honoured only by
    ``miewid`` (dropped for every other encoder)."""
    _ensure_registered()
    from ..models import load_encoder, resolve_name

    canon = resolve_name(name)
    if canon != "miewid":
        kw.pop("allow_remote_code", None)
    key = (canon, bool(tiny), str(device), tuple(sorted((k, repr(v)) for k, v in kw.items())))
    if key not in _POOL:
        _POOL[key] = load_encoder(canon, tiny=tiny, device=device, **kw)
    return _POOL[key]


def clear_encoders() -> None:
    """Forget the memoised encoders (frees memory between notebook sections)."""
    _POOL.clear()


# ----------------------------------------------------------------------------- fingerprints + cache
def encoder_fingerprint(model) -> str:
    """``cache_key()`` + a hash of the weights that the key does not pin down: a trained head
    (``nearid``), a trained classifier, or every parameter of a tiny random-init model."""
    import torch

    # A frozen model's weights never change: hash them once (a tiny random-init model has
    # millions of parameters and the notebook embeds many image sets).
    memo = getattr(model, "_fpr_fingerprint", None)
    if memo is not None and getattr(model, "frozen", False):
        return memo
    h = hashlib.sha1(model.cache_key().encode())
    parts = []
    if getattr(model, "tiny", False):
        parts.append(model)
    for attr in ("head", "classifier"):
        if hasattr(model, attr) and isinstance(getattr(model, attr), torch.nn.Module):
            parts.append(getattr(model, attr))
    for mod in parts:
        for k, v in sorted(mod.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().float().numpy().tobytes())
    fp = h.hexdigest()
    if getattr(model, "frozen", False):
        object.__setattr__(model, "_fpr_fingerprint", fp)
    return fp


def image_list_hash(paths: Sequence[str | os.PathLike], masks: Sequence[str] | None = None) -> str:
    """sha1 over the ordered list of image files' bytes (and masks, when given)."""
    h = hashlib.sha1()
    for i, p in enumerate(paths):
        h.update(Path(p).read_bytes())
        h.update(b"|")
        if masks is not None:
            h.update(Path(masks[i]).read_bytes() if masks[i] else b"-")
    h.update(str(len(paths)).encode())
    return h.hexdigest()


class EmbeddingCache:
    """``.npy`` files in ``folder`` keyed by encoder fingerprint + image list + variant; counts
    ``hits``/``misses`` (tests and logs use them)."""

    def __init__(self, folder: str | os.PathLike | None):
        self.folder = Path(folder) if folder is not None else None
        self.hits = 0
        self.misses = 0

    def key(self, fingerprint: str, images_hash: str, variant: str = "") -> str:
        return hashlib.sha1(f"{fingerprint}|{images_hash}|{variant}".encode()).hexdigest()

    def get_or_compute(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        if self.folder is not None:
            path = self.folder / f"{key}.npy"
            if path.exists():
                self.hits += 1
                return np.load(path)
        self.misses += 1
        arr = np.asarray(compute(), dtype=np.float32)
        if self.folder is not None:
            from ..io_utils import atomic_write

            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self.folder / f"{key}.npy", lambda p: np.save(open(p, "wb"), arr))
        return arr


def remove_background(image, mask, fill: tuple[int, int, int] = BG_FILL):
    """The image with every pixel outside ``mask`` (bool [H,W] or mode-L PIL, 255 = object) set
    to a neutral grey (paper Section 5.2 / Fig. 7)."""
    from PIL import Image

    img = np.asarray(image.convert("RGB")).copy()
    m = np.asarray(mask)
    m = m > 127 if m.dtype != bool else m
    if m.shape != img.shape[:2]:
        m = np.asarray(Image.fromarray(m.astype(np.uint8) * 255).resize(img.shape[1::-1], Image.NEAREST)) > 127
    img[~m] = fill
    return Image.fromarray(img)


def embed_images(model, paths: Sequence[str | os.PathLike], cache: EmbeddingCache | None = None,
                 batch_size: int = 32, masks: Sequence[str] | None = None,
                 background: str = "kept") -> np.ndarray:
    """L2-normalised embeddings [N, E] (float32) of image files, through the cache.

    ``background="removed"`` composites each image on neutral grey with its mask (``masks``
    required, one per path; an empty mask path is an error naming the image)."""
    from PIL import Image

    paths = [str(p) for p in paths]
    if background not in ("kept", "removed"):
        raise ValueError(f"embed_images: background must be 'kept' or 'removed', got {background!r}")
    if background == "removed":
        if masks is None or len(masks) != len(paths):
            raise ValueError("embed_images: background='removed' needs one mask per image")
        empty = [paths[i] for i, m in enumerate(masks) if not m]
        if empty:
            raise ValueError(f"embed_images: no mask for {len(empty)} image(s), e.g. {empty[0]}")
    if not paths:
        return np.zeros((0, getattr(model, "embed_dim", 0)), np.float32)

    def compute():
        out = []
        for i in range(0, len(paths), batch_size):
            ims = []
            for j in range(i, min(i + batch_size, len(paths))):
                with Image.open(paths[j]) as im:
                    im = im.convert("RGB")
                    if background == "removed":
                        with Image.open(masks[j]) as mk:
                            im = remove_background(im, mk.convert("L"))
                    ims.append(im)
            out.append(model.embed(ims, batch_size=batch_size).numpy())
        return np.concatenate(out)

    cache = cache or EmbeddingCache(None)
    key = cache.key(encoder_fingerprint(model),
                    image_list_hash(paths, masks if background == "removed" else None), background)
    return cache.get_or_compute(key, compute)


# ----------------------------------------------------------------------------- feature classifier
class FeatureClassifier:
    """Linear (``hidden=0``) or one-hidden-layer MLP classifier over frozen features.

    ``features(x)`` = the penultimate representation (hidden ReLU layer; identity for linear)."""

    def __new__(cls, in_dim: int, n_classes: int, hidden: int = 256, classes: Sequence[str] = ()):
        import torch
        from torch import nn

        class _FC(nn.Module):
            def __init__(self):
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
                from safetensors.torch import save_file

                from ..io_utils import atomic_write, write_json

                path = Path(path)
                atomic_write(path.with_suffix(".safetensors"),
                             lambda p: save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(p)))
                write_json({"in_dim": self.in_dim, "n_classes": self.n_classes, "hidden": self.hidden,
                            "classes": self.classes, "backbone": backbone}, path.with_suffix(".json"))
                return path.with_suffix(".safetensors")

        return _FC()

    @staticmethod
    def load(path):
        """``(classifier, meta)`` from :meth:`save`'s ``.safetensors`` + ``.json`` pair."""
        import json

        from safetensors.torch import load_file

        path = Path(path)
        meta = json.loads(path.with_suffix(".json").read_text())
        clf = FeatureClassifier(meta["in_dim"], meta["n_classes"], meta["hidden"], meta.get("classes", ()))
        clf.load_state_dict(load_file(str(path.with_suffix(".safetensors"))))
        clf.eval()
        return clf, meta


def train_feature_classifier(features: np.ndarray, labels: Sequence, hidden: int = 256,
                             epochs: int = 100, lr: float = 1e-2, weight_decay: float = 1e-4,
                             seed: int = 0, batch_size: int = 256):
    """Train a :class:`FeatureClassifier` (cross-entropy, AdamW, full-batch or mini-batches) on
    frozen features [N, D] with string/int ``labels``; returns ``(classifier, train_accuracy)``.

    This is how a notebook builds the fine-grained "SP-Cars" encoder when Stanford Cars is present:
    features = a frozen backbone's pooled output on the whole training split, labels = car model;
    then ``load_encoder("classifier", classifier=clf, backbone=...)`` embeds with its hidden layer."""
    import torch

    from ..seeding import torch_generator

    x = torch.as_tensor(np.asarray(features, dtype=np.float32))
    classes = sorted({str(v) for v in labels})
    y = torch.as_tensor([classes.index(str(v)) for v in labels])
    if x.ndim != 2 or len(x) != len(y):
        raise ValueError(f"train_feature_classifier: features {tuple(x.shape)} vs {len(y)} labels")
    torch.manual_seed(seed)
    clf = FeatureClassifier(x.shape[1], len(classes), hidden, classes)
    opt = torch.optim.AdamW(clf.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch_generator(seed, "classifier")
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), batch_size):
            idx = perm[i:i + batch_size]
            loss = torch.nn.functional.cross_entropy(clf(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    clf.eval()
    with torch.no_grad():
        acc = float((clf(x).argmax(1) == y).float().mean())
    return clf, acc
