"""FPR generation part of the dry-run mirror: the personalization methods' hub repositories
(:data:`nearid_lib.generate.personalize.METHODS`) as tiny random-weight pipelines of the production
classes, saved with ``save_pretrained`` under the real repo ids, so the paper path's
``from_pretrained`` / ``load_ip_adapter`` read them exactly as they read the real downloads:

- ``stabilityai/stable-diffusion-xl-base-1.0``: ``StableDiffusionXLPipeline`` (no image encoder,
  as the real repo);
- ``h94/IP-Adapter``: ``sdxl_models/ip-adapter_sdxl.safetensors`` and
  ``sdxl_models/ip-adapter-plus_sdxl_vit-h.safetensors`` in the original checkpoint layout, the
  image encoders ``sdxl_models/image_encoder`` (ViT-G's place) and ``models/image_encoder`` (ViT-H's);
- ``stabilityai/stable-diffusion-3-medium-diffusers``: ``StableDiffusion3Pipeline`` (DreamBooth);
- ``black-forest-labs/FLUX.1-Kontext-dev``: ``FluxKontextPipeline``;
- ``black-forest-labs/FLUX.1-Fill-dev``: ``FluxFillPipeline`` (Diptych).
"""
from __future__ import annotations

from pathlib import Path

from nearid_lib.generate.personalize import METHODS
from tools.tiny_models.pipelines import (build_tiny_flux_fill_pipeline, build_tiny_flux_kontext_pipeline,
                                       build_tiny_sd3_pipeline, build_tiny_sdxl_pipeline, write_tiny_ip_adapter)

__all__ = ["write_personalize_models"]


def write_personalize_models(hub_dir: str | Path, seed: int = 0) -> list[str]:
    """Write the generation methods' repos under ``hub_dir``; returns the repo ids written."""
    hub = Path(hub_dir)
    sdxl = build_tiny_sdxl_pipeline(seed)
    repo, sub, _, _ = METHODS["ip_adapter"].adapter
    for plus in (False, True):
        spec = METHODS["ip_adapter_plus" if plus else "ip_adapter"]
        write_tiny_ip_adapter(hub / repo, sdxl, plus=plus, seed=seed + int(plus), subfolder=sub,
                              weight_name=spec.adapter[2])
        enc = spec.adapter[3]
        sdxl.image_encoder.save_pretrained(hub / repo / (enc if "/" in enc else f"{sub}/{enc}"))
    sdxl.register_modules(image_encoder=None, feature_extractor=None)     # the base repo has none
    sdxl.save_pretrained(hub / METHODS["ip_adapter"].base)
    build_tiny_sd3_pipeline(seed).save_pretrained(hub / METHODS["dreambooth"].base)
    build_tiny_flux_kontext_pipeline(seed).save_pretrained(hub / METHODS["flux_kontext"].base)
    build_tiny_flux_fill_pipeline(seed).save_pretrained(hub / METHODS["diptych"].base)
    return sorted({r for k in ("dreambooth", "ip_adapter", "flux_kontext", "diptych") for r in METHODS[k].repos})
