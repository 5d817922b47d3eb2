"""The specialised encoders of Finer-Personalization Rank, registered with the one encoder registry.

- ``bioclip2``: BioCLIP 2 through open_clip, hub id ``hf-hub:imageomics/bioclip-2`` (CUB), read
  through :mod:`nearid_lib.hub` (a local mirror folder is given to open_clip as ``local-dir:``);
  weights are never downloaded in ``smoke``/``mini``. Its input is open_clip's own evaluation
  transform of the model (:class:`~.authors_preprocess.ShortestEdgeCrop` from the model's
  ``preprocess_cfg``), as the FPR authors feed it.
- ``miewid``: MiewID ``conservationxlabs/miewid-msv2``, the model of the FPR authors' code (the
  paper's MiewID row), and ``miewid-msv3``, its successor (an extra row, labelled as such), through
  transformers ``AutoModel`` with ``trust_remote_code=True``, read through :mod:`nearid_lib.hub` --
  remote code runs only when the caller opts in (``allow_remote_code=True``, i.e.
  ``RetrievalConfig.allow_remote_code``); otherwise a clear error. Embeddings are the model's
  ``extract_feat`` (the authors' call) of the authors' input: 440 x 440, albumentations'
  ``Normalize`` (:class:`~.authors_preprocess.ResizeNormalize`).
- ``classifier``: the pooled features of a fine-grained classifier (the paper's SP-Cars is an
  EfficientNetV2 trained on all of Stanford Cars): a frozen backbone followed by a
  :class:`~nearid_lib.models.classifier.FeatureClassifier`, embedding with its penultimate features
  (the hidden layer; for a linear classifier the backbone feature itself, i.e. a baseline).

They are registered when :mod:`nearid_lib.models` is imported, so ``load_encoder("bioclip2")``
resolves in a fresh process; their heavy dependencies (open_clip, transformers) are imported only
when one is built.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from ..hub import model_source, resolve
from .authors_preprocess import MIEWID_SIZE, ResizeNormalize, ShortestEdgeCrop
from .backbones import Encoder, EncoderOutput, Preprocess
from .classifier import FeatureClassifier
from .registry import StackedEncoder, build_registered, register_encoder

__all__ = ["OpenClipEncoder", "RemoteCodeEncoder", "ClassifierEncoder", "RemoteCodeError",
           "MIEWID_HUB_ID", "MIEWID_MSV3_HUB_ID", "BIOCLIP2_HUB_ID", "open_clip_source", "open_clip_preprocess",
           "TINY_OPEN_CLIP"]

MIEWID_HUB_ID = "conservationxlabs/miewid-msv2"          # the FPR authors' (evaluation/embeds_extractors.py)
MIEWID_MSV3_HUB_ID = "conservationxlabs/miewid-msv3"     # its successor: an extra row, never the paper's
BIOCLIP2_HUB_ID = "hf-hub:imageomics/bioclip-2"

# Random-init tiny ViT of open_clip's own class (offline), for tests only.
TINY_OPEN_CLIP = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 2, "width": 32,
                                                   "patch_size": 8, "head_width": 16},
                   "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2,
                                "layers": 1}}


def open_clip_source(name: str) -> str:
    """open_clip's model name for ``name`` through the hub resolver (:mod:`nearid_lib.hub`):
    ``hf-hub:<org>/<repo>`` (or a bare ``<org>/<repo>``) becomes ``local-dir:<mirror>/<org>/<repo>``
    when ``NEARID_HUB_DIR`` is set (a missing repo is a :class:`~nearid_lib.hub.HubError` with its
    download command), stays ``hf-hub:<org>/<repo>`` otherwise; other names (open_clip's built-in
    configs, ``local-dir:``) pass unchanged."""
    repo = name[len("hf-hub:"):] if name.startswith("hf-hub:") else name
    if name.startswith("local-dir:") or repo.count("/") != 1 and not name.startswith("hf-hub:"):
        return name
    r = resolve(repo, "model")
    return f"local-dir:{r.source}" if r.local else f"hf-hub:{repo}"


class RemoteCodeError(PermissionError):
    """An encoder needs ``trust_remote_code`` and the caller did not opt in."""


def open_clip_preprocess(model) -> Preprocess:
    """The evaluation transform open_clip builds for ``model`` (``create_model_and_transforms``'
    third value: the FPR authors' BioCLIP 2 input) as a :class:`Preprocess`: its ``preprocess_cfg``
    (image size, mean, std, interpolation; ``resize_mode`` "shortest": :class:`ShortestEdgeCrop`,
    "squash": a plain squash). "longest" (resize and pad) is not reproduced: an error says so."""
    import open_clip
    from open_clip.transform import PreprocessCfg

    # what create_model_and_transforms reads: the model's cfg over open_clip's defaults
    pc = PreprocessCfg(**open_clip.get_model_preprocess_cfg(model))
    size = pc.size
    if isinstance(size, (tuple, list)):
        if size[0] != size[1]:
            raise ValueError(f"open_clip model: non-square input {tuple(size)} is not supported")
        size = size[0]
    mean, std = tuple(float(v) for v in pc.mean), tuple(float(v) for v in pc.std)
    interp, mode = pc.interpolation, pc.resize_mode
    if mode == "shortest":
        return ShortestEdgeCrop(int(size), mean, std, "shorter_crop", 1.0, interp, crop="round")
    if mode == "squash":
        return Preprocess(int(size), mean, std, "squash", 1.0, interp)
    raise ValueError(f"open_clip model: resize_mode {mode!r} (resize and pad) is not reproduced here")


class OpenClipEncoder(Encoder):
    """open_clip image tower (BioCLIP 2); pooled = the image embedding, no tokens; input = open_clip's
    own evaluation transform of the model (:func:`open_clip_preprocess`)."""

    def __init__(self, name, hub_id, tiny=False, frozen=True, weights=None, **kw):
        import open_clip

        if tiny:
            model = open_clip.CLIP(**copy.deepcopy(TINY_OPEN_CLIP))
        else:
            model, _, _ = open_clip.create_model_and_transforms(open_clip_source(weights or hub_id))
        super().__init__(name, open_clip_preprocess(model),
                         tiny=tiny, frozen=frozen, weights="random" if tiny else (weights or hub_id))
        self.visual = model.visual
        self._finish()

    def _forward(self, pixel_values):
        return EncoderOutput(None, self.visual(pixel_values))


class RemoteCodeEncoder(Encoder):
    """transformers ``AutoModel`` with remote code (MiewID): pooled = the model's ``extract_feat``
    (the FPR authors' call; its plain output where it has none) of the authors' 440 x 440
    albumentations input (:class:`ResizeNormalize`)."""

    def __init__(self, name, hub_id, tiny=False, frozen=True, weights=None,
                 allow_remote_code=False, image_size=MIEWID_SIZE, **kw):
        if not allow_remote_code:
            raise RemoteCodeError(
                f"encoder {name!r} ({weights or hub_id}) runs code from the Hugging Face hub "
                f"(trust_remote_code=True). Opt in explicitly: load_encoder({name!r}, "
                f"allow_remote_code=True) or RetrievalConfig.allow_remote_code=True.")
        from transformers import AutoModel

        path, kw_src = model_source(weights or hub_id)      # the local mirror (NEARID_HUB_DIR) or the hub
        model = AutoModel.from_pretrained(path, trust_remote_code=True, **kw_src)
        super().__init__(name, ResizeNormalize(int(image_size)), tiny=False, frozen=frozen, weights=weights or hub_id)
        self.model = model
        self._finish()

    def _forward(self, pixel_values):
        extract = getattr(self.model, "extract_feat", None)
        out = extract(pixel_values) if callable(extract) else self.model(pixel_values)
        pooled = out if isinstance(out, torch.Tensor) else getattr(out, "pooler_output", out[0])
        return EncoderOutput(None, pooled)


class ClassifierEncoder(StackedEncoder):
    """A frozen backbone + a trained feature classifier; pooled = the classifier's penultimate
    features."""

    def __init__(self, name, backbone: Encoder, classifier: nn.Module, source: str = "trained"):
        if classifier.in_dim != backbone.embed_dim:
            raise ValueError(f"classifier encoder: classifier takes {classifier.in_dim}-d features, "
                             f"backbone {backbone.name!r} gives {backbone.embed_dim}-d")
        super().__init__(name, backbone, frozen=True, source=source)
        self.classifier = classifier
        self._finish()

    def _forward(self, pixel_values):
        out = self.backbone(pixel_values)
        return EncoderOutput(out.tokens, self.classifier.features(out.pooled.float()))

    def cache_key(self) -> str:
        return f"{self.name}|{self.backbone.cache_key()}"


def _classifier(name, hub_id, tiny=False, checkpoint=None, backbone="efficientnet-lite0",
                classifier=None, **kw):
    """Registry builder: ``classifier=`` (a trained :class:`FeatureClassifier`) or ``checkpoint=``
    (a file saved with :meth:`FeatureClassifier.save`, which also names its backbone)."""
    if classifier is None:
        if checkpoint is None:
            raise ValueError("classifier encoder: pass classifier= (from train_feature_classifier) "
                             "or checkpoint= (a file saved with FeatureClassifier.save)")
        classifier, meta = FeatureClassifier.load(checkpoint)
        backbone = meta.get("backbone", backbone)
    bb, _ = build_registered(backbone, tiny=tiny, **kw)
    return ClassifierEncoder(name, bb, classifier, source=f"clf:{classifier.fingerprint()[:10]}")


register_encoder("bioclip2", OpenClipEncoder, BIOCLIP2_HUB_ID, aliases=("bioclip-2", "bioclip"),
                 doc="BioCLIP 2 (open_clip), the paper's CUB specialist")
register_encoder("miewid", RemoteCodeEncoder, MIEWID_HUB_ID, aliases=("miewid-msv2",),
                 doc="MiewID msv2 (remote code, opt-in), the FPR authors' Re-ID specialist")
register_encoder("miewid-msv3", RemoteCodeEncoder, MIEWID_MSV3_HUB_ID,
                 doc="MiewID msv3 (remote code, opt-in): an extra row beside the authors' msv2")
register_encoder("classifier", _classifier, None, aliases=("sp-cars",),
                 doc="frozen backbone + trained feature classifier (SP-Cars substitute)")
