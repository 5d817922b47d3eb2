"""FPR's background removal (Table 14, Fig. 7) as the authors run it, and the copies it writes once.

The authors' ``evaluation/Evaluate.py`` removes the background of every query and gallery image
with carvekit's ``HiInterface(object_type="object", batch_size_seg=1, batch_size_matting=1,
seg_mask_size=640, matting_mask_size=2048, trimap_prob_threshold=231, trimap_dilation=30,
trimap_erosion_iters=5, fp16=False)`` and embeds ``result.convert("RGB")``: TRACER-B7 segments the
object, a trimap is cut around its mask, FBA matting refines the edge, and the RGBA result is the
image composited over grey (130, 130, 130) with the matte as alpha; dropping alpha keeps that
composite. :func:`build_interface` builds exactly those carvekit classes with those settings
(``HiInterface``'s own composition, tested against it), the two networks' weights read from the hub
mirror instead of carvekit's downloader:

==================  ===================  ==========================================  ========
repository          file                 revision carvekit 4.1.2 pins                size
==================  ===================  ==========================================  ========
``Carve/tracer_b7``  ``tracer_b7.pth``    d8a8fd9e7b3fa0d2f1506fe7242966b34381e9c5    267 MB
``Carve/fba``        ``fba_matting.pth``  a5d3457df0fb9c88ea19ed700d409756ca2069d1    139 MB
==================  ===================  ==========================================  ========

Each file's SHA-512 is compared with the checksum carvekit publishes for it
(``carvekit.utils.download_models.MODELS_CHECKSUMS``); other weights (the dry run's stand-in) run
the same code and are named in the provenance (:attr:`BgWeights.matches_release`). Batch sizes stay
1: FBA's input is then a thumbnail of the image (aspect kept), with larger batches a square resize,
so they change the result. The only settings (``retrieval.bg_sizes``) are the two networks' input
sizes, which the dry run shrinks.

Copies (:func:`remove_backgrounds`): ``<data>/fpr/_bg_removed/<settings>/<sha256 of the image
file>.png`` (the authors' RGB composite) and ``....alpha.png`` (the matte), written atomically,
skipped when present (resumable), a shard per rank (:mod:`.bg_step`). :func:`removed_tables` maps
a reference / gallery table onto its copies.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
import torch
from PIL import Image
from tqdm.auto import tqdm

from .. import hub
from ..io_utils import atomic_save_image, write_json
from ..paths import data_dir

__all__ = ["TRACER_REPO", "TRACER_FILE", "FBA_REPO", "FBA_FILE", "CARVEKIT_REVISIONS", "AUTHORS_SETTINGS", "BgWeights",
           "weights_reason", "resolve_weights", "build_interface", "remove_one", "remove_backgrounds",
           "removed_root", "removed_path", "removed_tables", "file_sha256"]

TRACER_REPO, TRACER_FILE = "Carve/tracer_b7", "tracer_b7.pth"
FBA_REPO, FBA_FILE = "Carve/fba", "fba_matting.pth"
CARVEKIT_REVISIONS = {TRACER_REPO: "d8a8fd9e7b3fa0d2f1506fe7242966b34381e9c5",
                      FBA_REPO: "a5d3457df0fb9c88ea19ed700d409756ca2069d1"}
# HiInterface's arguments in the authors' Evaluate.py (seg / matting sizes: retrieval.bg_sizes)
AUTHORS_SETTINGS = {"object_type": "object", "batch_size_seg": 1, "batch_size_matting": 1, "seg_mask_size": 640,
                    "matting_mask_size": 2048, "trimap_prob_threshold": 231, "trimap_dilation": 30,
                    "trimap_erosion_iters": 5, "fp16": False}


@dataclass(frozen=True)
class BgWeights:
    """The two weight files and whether each is carvekit's release (SHA-512 as carvekit publishes)."""

    tracer: Path
    fba: Path
    sha512: dict = field(default_factory=dict)
    matches_release: dict = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{n}: carvekit release" if ok else f"{n}: NOT carvekit release weights (sha512 {self.sha512[n][:16]})"
                 for n, ok in self.matches_release.items()]
        return "; ".join(parts)


def _carvekit_missing() -> str | None:
    try:
        import carvekit  # noqa: F401
    except ImportError:
        return "carvekit is not installed (pip install 'nearid_lib[paper]')"
    return None


def _weight_file(repo: str, filename: str) -> Path:
    """The file from the mirror folder of ``repo`` (``NEARID_HUB_DIR``), or from the hub at carvekit's
    pinned revision; a :class:`~nearid_lib.hub.HubError` names the download command."""
    r = hub.resolve(repo, "model", CARVEKIT_REVISIONS.get(repo))
    if r.local:
        f = Path(r.source) / filename
        if not f.is_file():
            raise hub.HubError(f"{repo}: {filename} missing in {r.source}; fetch it with: "
                               f"{hub.download_command(repo)}")
        return f
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo, filename, revision=CARVEKIT_REVISIONS.get(repo)))


def weights_reason() -> str | None:
    """Why background removal cannot run here (carvekit absent, a weight repo not in the mirror),
    without loading anything; None when it can."""
    why = _carvekit_missing()
    if why:
        return why
    for repo, f in ((TRACER_REPO, TRACER_FILE), (FBA_REPO, FBA_FILE)):
        try:
            if hub.hub_dir() is not None:
                _weight_file(repo, f)
        except hub.HubError as err:
            return f"background-removal weights: {err}"
    return None


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sha512(path: Path) -> str:
    h = hashlib.sha512()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_weights() -> BgWeights:
    """Both weight files (mirror or hub, never carvekit's downloader) with their release check."""
    from carvekit.utils.download_models import MODELS_CHECKSUMS

    files = {"tracer_b7": _weight_file(TRACER_REPO, TRACER_FILE), "fba": _weight_file(FBA_REPO, FBA_FILE)}
    sha = {k: _sha512(p) for k, p in files.items()}
    ok = {"tracer_b7": sha["tracer_b7"] == MODELS_CHECKSUMS["tracer_b7.pth"],
          "fba": sha["fba"] == MODELS_CHECKSUMS["fba_matting.pth"]}
    return BgWeights(files["tracer_b7"], files["fba"], sha, ok)


def _load(module: torch.nn.Module, path: Path, strict: bool) -> None:
    """``load_state_dict`` of ``path`` read with ``weights_only=True``; non-strict for TRACER as
    carvekit loads it (its file carries unused keys), but a file sharing no key is an error."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a damaged download, a pickle with code
        raise ValueError(f"{path}: not a tensor state dict loadable with weights_only=True ({err})") from err
    res = module.load_state_dict(sd, strict=strict)
    if not strict and len(res.missing_keys) == len(module.state_dict()):
        raise ValueError(f"{path}: none of its keys fits {type(module).__name__}")


def build_interface(weights: BgWeights, device: str = "cpu", seg_size: int = 640, matting_size: int = 2048):
    """carvekit's ``HiInterface`` for ``object_type="object"`` at the authors' settings
    (:data:`AUTHORS_SETTINGS`, the two sizes given), built from its classes so that the weights come
    from ``weights``: ``Interface(seg_pipe=TracerUniversalB7, post_pipe=MattingMethod(FBAMatting,
    TrimapGenerator(231, 30, 5)))``."""
    from carvekit.api.interface import Interface
    from carvekit.ml.wrap.fba_matting import FBAMatting
    from carvekit.ml.wrap.tracer_b7 import TracerUniversalB7
    from carvekit.pipelines.postprocessing import MattingMethod
    from carvekit.trimap.generator import TrimapGenerator

    s = AUTHORS_SETTINGS
    hub.note_load(TRACER_REPO, "background removal")
    hub.note_load(FBA_REPO, "background removal")
    seg = TracerUniversalB7(device=device, input_image_size=int(seg_size), batch_size=s["batch_size_seg"],
                            load_pretrained=False, fp16=s["fp16"], model_path=str(weights.tracer))
    _load(seg, weights.tracer, strict=False)
    fba = FBAMatting(device=device, input_tensor_size=int(matting_size), batch_size=s["batch_size_matting"],
                     load_pretrained=False, fp16=s["fp16"])
    _load(fba, weights.fba, strict=True)
    seg.to(device).eval()
    fba.to(device).eval()
    trimap = TrimapGenerator(prob_threshold=s["trimap_prob_threshold"], kernel_size=s["trimap_dilation"],
                             erosion_iters=s["trimap_erosion_iters"])
    return Interface(pre_pipe=None, seg_pipe=seg, post_pipe=MattingMethod(matting_module=fba, trimap_generator=trimap,
                                                                          device=device), device=device)


def remove_one(interface, path: str | os.PathLike) -> tuple[Image.Image, Image.Image]:
    """``(rgb, alpha)`` of one image file as the authors compute it: ``Image.open(path).convert("RGB")``
    through the interface; ``rgb`` = the result's ``convert("RGB")`` (the composite over grey the
    encoders see), ``alpha`` = its matte (mode L)."""
    with Image.open(path) as im:
        rgba = interface([im.convert("RGB")])[0]
    return rgba.convert("RGB"), rgba.getchannel("A")


def removed_root(profile: str, weights: BgWeights, sizes: Sequence[int] = (640, 2048)) -> Path:
    """``<data>/fpr/_bg_removed/<key>``: the copies of one setting (the weights' checksums, the
    sizes, the authors' thresholds): other weights or sizes never read these copies."""
    base = data_dir(profile) / "fpr" / "_bg_removed"
    key = json.dumps({"sha512": weights.sha512, "sizes": [int(x) for x in sizes], "settings": AUTHORS_SETTINGS},
                     sort_keys=True)
    return base / hashlib.sha256(key.encode()).hexdigest()[:12]


def removed_path(root: Path, sha: str) -> Path:
    return root / sha[:2] / f"{sha}.png"


def remove_backgrounds(paths: Sequence[str], profile: str, sizes: Sequence[int], rank: int = 0, world: int = 1,
                       device: str = "cpu", progress: bool = False, log: Callable[[str], None] = print) -> dict:
    """Write the copies of ``paths`` (this rank's share: every ``world``-th image of the sorted
    unique content hashes, from ``rank``), skipping those already written; the networks load only
    when something is left to do. Returns counts and the settings folder."""
    weights = resolve_weights()
    root = removed_root(profile, weights, sizes)
    shas = sorted({file_sha256(p): str(p) for p in paths}.items())
    mine = [(h, p) for i, (h, p) in enumerate(shas) if i % world == rank]
    todo = [(h, p) for h, p in mine if not removed_path(root, h).exists()]
    if rank == 0:
        write_json({"weights": {k: str(getattr(weights, k)) for k in ("tracer", "fba")}, "sha512": weights.sha512,
                    "carvekit_release": weights.matches_release, "sizes": list(sizes),
                    "settings": AUTHORS_SETTINGS}, root / "settings.json")
    if todo:
        interface = build_interface(weights, device, *sizes)
        it = todo
        if progress:
            it = tqdm(todo, desc=f"background removal (rank {rank})", unit="img")
        for h, p in it:
            rgb, alpha = remove_one(interface, p)
            out = removed_path(root, h)
            atomic_save_image(out.with_suffix(".alpha.png"), alpha)
            atomic_save_image(out, rgb)                     # written last: its presence means done
    log(f"background removal: rank {rank}/{world}: {len(mine)} images, {len(todo)} written, root {root}")
    return {"root": str(root), "images": len(mine), "written": len(todo), "weights": weights.describe()}


def removed_tables(tables: Sequence[pd.DataFrame], profile: str, sizes: Sequence[int], device: str = "cpu"
                   ) -> tuple[list[pd.DataFrame], str]:
    """Each table with ``file_path`` replaced by its background-removed copy (the authors' RGB
    composite; ``alpha_path``: the matte), the copies written first where missing
    (:func:`remove_backgrounds` in this process: the step, :mod:`.bg_step`, usually did it); and
    what weights made them."""
    paths = [p for t in tables for p in t["file_path"]]
    info = remove_backgrounds(paths, profile, sizes, device=device)
    root = Path(info["root"])
    out = []
    for t in tables:
        shas = [file_sha256(p) for p in t["file_path"]]
        out.append(t.drop(columns=["mask_path"], errors="ignore").assign(
            file_path=[str(removed_path(root, h)) for h in shas],
            alpha_path=[str(removed_path(root, h).with_suffix(".alpha.png")) for h in shas]))
    return out, info["weights"]
