"""The released ID-Sim models (``chaenayo/id-sim_dinov3_vitl16_cls_patch``, the paper's, and the three
other backbones' checkpoints of :mod:`.release_backbones`) loaded into ``transformers``.

What the release is (facts read from the authors' ``id_sim`` package; see ``docs/library.md``):

* ``adapter_config.json`` + ``adapter_model.safetensors``: a PEFT LoRA saved from a model that wraps
  Meta's native torch.hub DINOv3 ViT-L/16 inside their perceptual model, so its keys are in Meta's
  key space, e.g. ``base_model.model.extractor.model.blocks.{N}.attn.qkv.lora_A.weight`` ([r, D]) and
  ``...lora_B.weight`` ([3D, r]): a delta of Meta's *fused* ``attn.qkv`` weight (rows q, k, v).
* ``mlp_cls.pth`` / ``mlp_patch.pth``: plain state dicts of two residual heads
  ``z = fc2(silu(fc1(ln(x)))) + sigmoid(beta_logit) * x`` (:class:`ResidualHead`), keys
  ``ln.weight ln.bias fc1.weight fc1.bias fc2.weight fc2.bias beta_logit``.
* The base is DINOv3 ViT-L/16 LVD-1689M, which ``transformers`` ships converted from Meta's keys as
  ``facebook/dinov3-vitl16-pretrain-lvd1689m`` (``DINOv3ViTModel``: the fused qkv split into
  ``q_proj``/``k_proj``/``v_proj``, ``attn.proj`` -> ``o_proj``, ``mlp.fc1``/``fc2`` ->
  ``up_proj``/``down_proj``, Meta's masked key bias dropped).

:func:`load_idsim_release` therefore merges each LoRA delta where Meta applies it: per block, the
fused ``[3D, D]`` weight is rebuilt from ``q_proj``/``k_proj``/``v_proj`` (in that order),
``scale * B @ A`` is added (``scale = lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with rsLoRA, as
``adapter_config.json`` says) and the result is split back. ``attn.proj`` / ``mlp.fc1`` /
``mlp.fc2`` deltas (when ``target_modules`` names them) go to ``o_proj`` / ``up_proj`` /
``down_proj``. Every adapter tensor must be consumed: a key outside that map, a block index out of
range, a shape that does not fit, a lone ``lora_A`` / ``lora_B`` or a setting this merge cannot honour
(``bias != "none"``, DoRA, ``modules_to_save``, rank/alpha patterns, base-modifying initialisations)
is an error naming the file and the key.

Features as the release computes them (:class:`IDSimRelease`): the output of the **last block
before the final LayerNorm** (a forward hook on the last ``DINOv3ViTLayer``; in transformers 5.24
that tensor is also ``hidden_states[-1]``, checked in the tests, while the 4.5x sources replace the
last entry by the post-norm output, so the hook, not the index, is what this code relies on),
tokens ``[CLS, registers, patches]`` with the registers dropped, CLS through
``mlp_cls`` and every patch token through ``mlp_patch``, each embedding mean-centred over its
feature dimension and then L2-normalised (DreamSim-style ``normalize_embedding``). Images: RGB, a
square bicubic resize to 448 x 448 (PIL, antialiased; no crop), [0, 1], ImageNet mean / std (the
library's image loader composes an alpha channel onto black where the authors' ``convert("RGB")``
drops it: the two differ for images with transparency only).

Distances (the release's default policy, "pooled cosine"; Sinkhorn is never used by its public
API): ``cls = 1 - cos(cls_a, cls_b)``; ``patch = 1 - cos(mean_a, mean_b)`` where ``mean`` is the
mean of the (normalised) patch embeddings; ``joint = cls + patch`` in [0, 4]
(:meth:`IDSimRelease.distance`). As an :class:`~nearid_lib.models.encoder_base.Encoder` the model's
``pooled`` output is the normalised CLS embedding and its ``tokens`` the normalised patch
embeddings, so every scorer of the library (``embed`` = CLS cosine; a patch scorer's mean of
normalised tokens = the release's patch embedding) reads the release's own quantities.

``load_encoder("idsim-release")`` builds it through :mod:`nearid_lib.hub` (both repos from the
local mirror when ``NEARID_HUB_DIR`` is set); ``tiny=True`` reads the tiny release that the dry-run
mirror holds (:func:`tools.paper_fixtures.idsim.write_idsim_backbones`) and needs ``NEARID_HUB_DIR``.
The DINOv3 ViT-B/16 and DINOv2 ViT-L/14 / ViT-B/14 checkpoints load the same way over their own
bases (``idsim-release-dinov3-vitb16``, ...; :mod:`.release_backbones`: a DINOv2 base is a
``Dinov2Model``, its fused qkv rows split into ``query`` / ``key`` / ``value``).
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import hub
from ..models.encoder_base import IMAGENET_MEAN, IMAGENET_STD, Encoder, EncoderOutput, Preprocess
from ..runtime.runmeta import code_fingerprint
from .release_adapter import AdapterConfig, Delta, ReleaseFormatError, encoder_layers, merge_adapter, read_adapter  # noqa: F401
from .release_backbones import load_base, spec_for

__all__ = ["RELEASE_REPO", "BASE_REPO", "RELEASE_FILES", "RELEASE_IMAGE_SIZE", "HEAD_KEYS", "ReleaseFormatError",
           "AdapterConfig", "ResidualHead", "IDSimRelease", "read_adapter", "merge_adapter", "load_head",
           "normalize_embedding", "load_idsim_release", "release_encoder", "release_available"]

RELEASE_REPO = "chaenayo/id-sim_dinov3_vitl16_cls_patch"
BASE_REPO = "facebook/dinov3-vitl16-pretrain-lvd1689m"
RELEASE_FILES = ("adapter_config.json", "adapter_model.safetensors", "mlp_cls.pth", "mlp_patch.pth")
RELEASE_IMAGE_SIZE = 448
HEAD_KEYS = ("ln.weight", "ln.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "beta_logit")

def _hf_hint(repo: str) -> str:
    return f"fetch it with: {hub.download_command(repo)}"


class ResidualHead(nn.Module):
    """The release's projection head: ``fc2(silu(fc1(ln(x)))) + sigmoid(beta_logit) * x`` (the
    output has the input's width; LayerNorm eps 1e-5, PyTorch's default)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.beta_logit = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(self.ln(x)))) + torch.sigmoid(self.beta_logit) * x


def load_head(path: str | os.PathLike, dim: int) -> ResidualHead:
    """A :class:`ResidualHead` from ``path`` (``torch.load(weights_only=True)``), strictly: a
    missing or unexpected key, or a shape that does not fit the base width ``dim``, is an error
    naming the file and the key."""
    path = Path(path)
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle / zip errors of a damaged or non-tensor file
        raise ReleaseFormatError(f"{path}: not a tensor state dict loadable with torch.load(weights_only=True) "
                                 f"({type(err).__name__}: {err})") from err
    if not isinstance(sd, Mapping):
        raise ReleaseFormatError(f"{path}: expected a state dict, got {type(sd).__name__}")
    missing = [k for k in HEAD_KEYS if k not in sd]
    if missing:
        raise ReleaseFormatError(f"{path}: key {missing[0]!r} missing (a head needs {', '.join(HEAD_KEYS)})")
    extra = sorted(k for k in sd if k not in HEAD_KEYS)
    if extra:
        raise ReleaseFormatError(f"{path}: unexpected key {extra[0]!r} (a head has {', '.join(HEAD_KEYS)})")
    bad = [k for k in HEAD_KEYS if not isinstance(sd[k], torch.Tensor)]
    if bad:
        raise ReleaseFormatError(f"{path}: key {bad[0]!r} is not a tensor")
    hidden = int(sd["fc1.weight"].shape[0])
    head = ResidualHead(dim, hidden)
    want = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    for k in HEAD_KEYS:
        if tuple(sd[k].shape) != want[k]:
            raise ReleaseFormatError(f"{path}: key {k!r} has shape {tuple(sd[k].shape)}, expected {want[k]} "
                                     f"(base width {dim}, head hidden {hidden})")
    head.load_state_dict({k: sd[k].float() for k in HEAD_KEYS}, strict=True)
    return head


def normalize_embedding(x: torch.Tensor) -> torch.Tensor:
    """The release's embedding normalisation: mean-centre over the last (feature) dim, then L2."""
    x = x.float()
    return F.normalize(x - x.mean(dim=-1, keepdim=True), dim=-1)


# ----------------------------------------------------------------------------- the encoder
class IDSimRelease(Encoder):
    """The released ID-Sim (see the module docstring): a ``DINOv3ViTModel`` with the LoRA merged,
    ``mlp_cls`` and ``mlp_patch``.

    ``model(pixel_values)`` -> ``EncoderOutput(tokens=[B, N, D] normalised patch embeddings,
    pooled=[B, D] normalised CLS embedding)``. Like :class:`~nearid_lib.idsim.model.IDSimModel`:
    :meth:`prefix` (pixels: a ViT has no frozen prefix), :meth:`raw_from_prefix` (the backbone's
    pre-norm CLS and patch tokens the heads read), :meth:`project` (the heads, unnormalised),
    :meth:`from_prefix`, :meth:`adapters_disabled` (the base DINOv3 inside the block). For pairs of
    images: :meth:`embeddings` (``cls`` / ``patch`` / ``joint``) and :meth:`distance`."""

    def __init__(self, backbone: nn.Module, mlp_cls: ResidualHead, mlp_patch: ResidualHead, deltas: list[Delta],
                 *, image_size: int, name: str = "idsim-release", tiny: bool = False, weights: str | None = None,
                 info: dict[str, Any] | None = None):
        cfg = backbone.config
        patch = int(cfg.patch_size)
        if image_size % patch:
            raise ValueError(f"{name}: image_size {image_size} is not a multiple of the patch size {patch}")
        super().__init__(name, Preprocess(image_size, IMAGENET_MEAN, IMAGENET_STD, "squash", 1.0, "bicubic"),
                         tiny=tiny, frozen=True, weights=weights)
        self.model = backbone
        self.mlp_cls = mlp_cls
        self.mlp_patch = mlp_patch
        self._deltas = deltas
        self._n_prefix = 1 + int(getattr(cfg, "num_register_tokens", 0) or 0)
        self.info = dict(info or {})
        self._finish()

    # ------------------------------------------------------------------ features
    def backbone_tokens(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, 1 + R + N, D]: the last block's output **before** the final LayerNorm (a forward hook
        on the last layer; the model's own outputs are post-norm)."""
        got: list[torch.Tensor] = []
        last = encoder_layers(self.model)[-1]
        handle = last.register_forward_hook(
            lambda mod, args, out: got.append(out[0] if isinstance(out, (tuple, list)) else out))
        try:
            self.model(pixel_values=pixel_values.to(device=self.device, dtype=self.dtype))
        finally:
            handle.remove()
        return got[-1]

    @torch.no_grad()
    def prefix(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The frozen part: a ViT has none, so the pixel values themselves."""
        return pixel_values.to(device=self.device, dtype=self.dtype)

    def raw_from_prefix(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cls [B, D], patch tokens [B, N, D]): the pre-norm tokens of :meth:`backbone_tokens`,
        registers dropped."""
        h = self.backbone_tokens(feats)
        return h[:, 0], h[:, self._n_prefix:]

    def project(self, cls: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The heads: (``mlp_cls(cls)`` [B, D], ``mlp_patch(tokens)`` [B, N, D]), not normalised."""
        p = self.mlp_cls.fc1.weight
        return self.mlp_cls(cls.to(p.dtype)), self.mlp_patch(tokens.to(p.dtype))

    def from_prefix(self, feats: torch.Tensor) -> EncoderOutput:
        """Normalised (:func:`normalize_embedding`) patch embeddings as ``tokens``, CLS as ``pooled``."""
        c, z = self.project(*self.raw_from_prefix(feats))
        return EncoderOutput(normalize_embedding(z), normalize_embedding(c))

    def _forward(self, pixel_values):
        return self.from_prefix(pixel_values)

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """Within the block the backbone is the base DINOv3 (each merged delta subtracted; the
        merged weights are restored exactly on exit)."""
        saved = [(d.linear, d.linear.weight.detach().clone()) for d in self._deltas]
        try:
            with torch.no_grad():
                for d in self._deltas:
                    w = d.linear.weight
                    w.copy_((w.float() - d.weight(w)).to(w.dtype))
            yield
        finally:
            with torch.no_grad():
                for lin, w in saved:
                    lin.weight.copy_(w)

    # ------------------------------------------------------------------ the metric
    @torch.no_grad()
    def embeddings(self, images: Sequence[Any], batch_size: int = 16,
                   kinds: Sequence[str] = ("cls", "patch", "joint")) -> dict[str, torch.Tensor]:
        """L2-normalised embeddings of ``images`` by kind: ``cls`` [N, D]; ``patch`` [N, D] (mean of
        the normalised patch embeddings, normalised: its cosine is the release's patch similarity);
        ``joint`` [N, 2D] = ``[cls, patch] / sqrt(2)`` (cosine = mean of the two cosines);
        ``tokens`` [N, T, D] (the normalised patch embeddings themselves)."""
        bad = [k for k in kinds if k not in ("cls", "patch", "joint", "tokens")]
        if bad:
            raise ValueError(f"{self.name}.embeddings: unknown kind(s) {bad}; valid: cls, patch, joint, tokens")
        out = self.encode(images, batch_size=batch_size)
        cls = out.pooled
        patch = F.normalize(out.tokens.mean(1), dim=-1)
        res = {"cls": cls, "patch": patch, "joint": torch.cat([cls, patch], 1) / math.sqrt(2), "tokens": out.tokens}
        return {k: res[k] for k in kinds}

    @torch.no_grad()
    def distance(self, first: Sequence[Any], second: Sequence[Any], mode: str = "joint",
                 batch_size: int = 16) -> np.ndarray:
        """The release's distance of ``first[i]`` and ``second[i]``: ``cls`` = 1 - cos of the CLS
        embeddings, ``patch`` = 1 - cos of the mean patch embeddings, ``joint`` = their sum (0..4)."""
        if mode not in ("cls", "patch", "joint"):
            raise ValueError(f"{self.name}.distance: mode must be 'cls', 'patch' or 'joint', got {mode!r}")
        if len(first) != len(second):
            raise ValueError(f"{self.name}.distance: {len(first)} first images vs {len(second)} second images")
        a = self.embeddings(first, batch_size, ("cls", "patch"))
        b = self.embeddings(second, batch_size, ("cls", "patch"))
        d = {k: 1.0 - (a[k] * b[k]).sum(-1).double() for k in ("cls", "patch")}
        return (d["cls"] + d["patch"] if mode == "joint" else d[mode]).numpy()

    # ------------------------------------------------------------------ identity
    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def spec(self) -> dict[str, Any]:
        spec = super().spec()
        spec.update({"checkpoint": self.info.get("release"), "base": self.info.get("base")})
        return spec

    def cache_key(self) -> str:
        """Identity of the produced features: weights (the release files' hash and the base's
        source), dtype, preprocessing and this module's code."""
        code = code_fingerprint("idsim/release_model.py", "models/encoder_base.py", "imageio.py")
        return (f"{self.name}|tiny={int(self.tiny)}|w={self.weights}|dtype={str(self.dtype).replace('torch.', '')}"
                f"|{self.preprocess.key()}|code={code}")


# ----------------------------------------------------------------------------- loading
def _release_folder(repo_or_dir: str) -> tuple[Path, str | None]:
    """The local folder of the release and its revision: an existing folder, the mirror's copy
    (``NEARID_HUB_DIR``; absent: :class:`~nearid_lib.hub.HubError` with the download command), or a
    hub snapshot of :data:`RELEASE_FILES`."""
    where = hub.resolve(repo_or_dir, "model")
    if where.local:
        return Path(where.source), where.revision
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(repo_or_dir, revision=where.revision, allow_patterns=list(RELEASE_FILES))
    except Exception as err:  # offline, gated, unknown repo: say what to do
        raise OSError(f"idsim-release: cannot download {repo_or_dir!r} from the Hugging Face hub "
                      f"({type(err).__name__}); run once with hub access (HF_HUB_OFFLINE unset), or put it in a "
                      f"local mirror and set {hub.HUB_DIR_ENV}: {_hf_hint(repo_or_dir)}") from err
    return Path(path), where.revision


def _files_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in RELEASE_FILES:
        with open(folder / f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:12]


def _dtype(dtype: Any) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise ValueError(f"idsim-release: dtype must be one of {', '.join(table)}, got {dtype!r}")
    return table[dtype]


def load_idsim_release(repo_or_dir: str | os.PathLike = RELEASE_REPO, base: str | os.PathLike = BASE_REPO,
                       device: str | torch.device = "cpu", dtype: Any = None, image_size: int | None = None,
                       tiny: bool = False, name: str = "idsim-release") -> IDSimRelease:
    """The released ID-Sim as an :class:`IDSimRelease` (see the module docstring).

    ``repo_or_dir``: the release (hub repo id, resolved through :mod:`nearid_lib.hub`, or a local
    folder holding :data:`RELEASE_FILES`); ``base``: the ``transformers`` DINOv3 it adapts (repo id
    or ``save_pretrained`` folder). The merge runs in float32; the backbone is then cast to
    ``dtype`` ("float32" default, "bfloat16", "float16"; the heads stay float32). ``image_size``:
    default 448 (the release's), the base config's own size for ``tiny``.

    Raises :class:`~nearid_lib.hub.HubError` (a repo missing from the mirror, with its download
    command), FileNotFoundError naming a missing release file, :class:`ReleaseFormatError` naming
    the file and key that does not map."""
    folder, rev = _release_folder(str(repo_or_dir))
    for f in RELEASE_FILES:
        if not (folder / f).is_file():
            raise FileNotFoundError(f"idsim-release: {f} missing in {folder} (the release holds "
                                    f"{', '.join(RELEASE_FILES)}); {_hf_hint(str(repo_or_dir))}")
    cfg, tensors = read_adapter(folder)
    base_model = load_base(str(base), name)
    dim = int(base_model.config.hidden_size)
    deltas = merge_adapter(base_model, cfg, tensors, str(folder / "adapter_model.safetensors"))
    mlp_cls = load_head(folder / "mlp_cls.pth", dim)
    mlp_patch = load_head(folder / "mlp_patch.pth", dim)
    dt = _dtype(dtype)
    if dt is not None and dt != torch.float32:
        base_model = base_model.to(dt)
    size = image_size or (int(base_model.config.image_size) if tiny else RELEASE_IMAGE_SIZE)
    base_rev = hub.reads().get(str(base), {}).get("revision")
    weights = (f"{repo_or_dir}@{rev or 'unpinned'}#{_files_hash(folder)}+{base}@{base_rev or 'unpinned'}")
    info = {"release": str(repo_or_dir), "release_path": str(folder), "release_revision": rev, "base": str(base),
            "base_revision": base_rev, "r": cfg.r, "lora_alpha": cfg.lora_alpha, "use_rslora": cfg.use_rslora,
            "scale": cfg.scale, "target_modules": cfg.target_modules, "n_lora_tensors": len(tensors),
            "n_merged": len(deltas)}
    model = IDSimRelease(base_model, mlp_cls, mlp_patch, deltas, image_size=size, name=name, tiny=tiny,
                         weights=weights, info=info)
    return model.to(device) if device is not None and str(device) != "cpu" else model


def release_available(repo_id: str = RELEASE_REPO, base: str = BASE_REPO) -> str | None:
    """None when both the release and its base can be read (in the mirror, or the hub when no
    mirror is set), else the reason: which of the two is not in the hub mirror, with
    :class:`~nearid_lib.hub.HubError`'s message (the download command). Loads nothing."""
    for rid, what in ((repo_id, "released ID-Sim checkpoint"),
                      (base, f"base DINOv3 of the released ID-Sim {repo_id},")):
        if not hub.is_available(rid):
            try:
                hub.resolve(rid, "model")
            except hub.HubError as err:
                return f"{what} {rid} not in the hub mirror: {err}"
    return None


def release_encoder(tiny: bool = False, checkpoint: str | os.PathLike | None = None,
                    base: str | os.PathLike | None = None, hub_id: str | None = None, weights: str | None = None,
                    **kw: Any) -> IDSimRelease:
    """What ``load_encoder("idsim-release", ...)`` builds (:mod:`nearid_lib.models.registry`):
    ``checkpoint`` (default: the registered release repo), ``base``, ``image_size``, ``dtype``;
    other keywords are ignored. ``tiny=True`` reads the dry-run mirror's tiny release (a full
    release is never random-init: without ``NEARID_HUB_DIR`` it is an error saying so)."""
    if weights is not None:
        raise ValueError(f"idsim-release: weights={weights!r} is not supported (the release's weights are the "
                         f"LoRA and heads of checkpoint= over base=; there is no random-init release)")
    if tiny and hub.hub_dir() is None:
        raise OSError(f"idsim-release: tiny=True reads the tiny release of a dry-run mirror, and "
                      f"{hub.HUB_DIR_ENV} is not set. Write one with `python -m tools.paper_fixtures HUB_DIR "
                      f"DOWNLOADS_DIR` (tools.paper_fixtures.idsim.write_idsim_backbones) and set "
                      f"{hub.HUB_DIR_ENV}=HUB_DIR, or load the real release with tiny=False")
    repo = checkpoint or hub_id or RELEASE_REPO
    spec = spec_for(str(repo))
    return load_idsim_release(repo, base or (spec.base if spec else BASE_REPO), device="cpu", dtype=kw.get("dtype"),
                              image_size=kw.get("image_size"), tiny=tiny, name=kw.get("name") or "idsim-release")
