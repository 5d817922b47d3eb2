"""What each diffusers backend is (NearID Appendix B.1, ID-Sim Appendix A.2 / F.1): its pipeline class,
native resolution, call defaults and call shape (:data:`SPECS`), the default hub ids, and the NearID
source names -> (backend, working resolution) (:data:`NEARID_SOURCES`). Plain data: importing this
module loads no model library."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["BackendSpec", "SPECS", "NEARID_SOURCES", "source_backend", "DEFAULT_HUB_IDS", "SDXL_NEGATIVE_PROMPT",
           "QWEN_LIGHTNING_SCHEDULER", "SPECS_POWERPAINT"]


SDXL_NEGATIVE_PROMPT = (
    "text, watermark, logo, signature, caption, letters, low resolution, lowres, blurry, jpeg "
    "artifacts, pixelated, low quality, worst quality, deformed, distorted, cropped, duplicate")


# Hub ids are defaults only; GenerateConfig.hub_ids overrides them (paper profile).
DEFAULT_HUB_IDS: dict[str, str] = {
    "sdxl": "diffusers/stable-diffusion-xl-1.0-inpainting-0.1",
    "flux_fill": "black-forest-labs/FLUX.1-Fill-dev",
    "flux_canny": "black-forest-labs/FLUX.1-Canny-dev",
    "qwen_controlnet": "Qwen/Qwen-Image",
    "qwen_controlnet.controlnet": "InstantX/Qwen-Image-ControlNet-Inpainting",
    "qwen_controlnet.lora": "lightx2v/Qwen-Image-Lightning",
    "qwen_controlnet.lora_weight": "Qwen-Image-Lightning-8steps-V1.1.safetensors",
    "qwen_edit": "Qwen/Qwen-Image-Edit",
    "qwen_edit.lora": "lightx2v/Qwen-Image-Lightning",
    "qwen_edit.lora_weight": "Qwen-Image-Edit-Lightning-8steps-V1.0.safetensors",
    "flux_fill_identity": "black-forest-labs/FLUX.1-Fill-dev",
    "powerpaint": "JunhaoZhuang/PowerPaint-v2-1",
    "powerpaint.base": "SG161222/Realistic_Vision_V6.0_B1_noVAE",
}


# Lightning LoRA scheduler: the distilled 8-step trajectory needs this flow-match configuration
# (exponential time shift, shift log 3) instead of Qwen-Image's default one.
QWEN_LIGHTNING_SCHEDULER = {
    "base_image_seq_len": 256, "base_shift": math.log(3), "invert_sigmas": False,
    "max_image_seq_len": 8192, "max_shift": math.log(3), "num_train_timesteps": 1000,
    "shift": 1.0, "shift_terminal": None, "stochastic_sampling": False,
    "time_shift_type": "exponential", "use_beta_sigmas": False, "use_dynamic_shifting": True,
    "use_exponential_sigmas": False, "use_karras_sigmas": False,
}



@dataclass(frozen=True)
class BackendSpec:
    """What a diffusers backend needs: its pipeline class, sizes, defaults and call shape."""

    name: str
    pipeline_cls: str                      # diffusers class name
    native_resolution: int
    defaults: dict[str, Any]
    multiple: int = 16                     # working sizes are multiples of this
    batchable: bool = True
    call_style: str = "inpaint"            # inpaint | flux_fill | flux_control | qwen_cn | qwen_edit
    paper: str = ""                        # where the settings come from


SPECS: dict[str, BackendSpec] = {
    "sdxl": BackendSpec(
        "sdxl", "StableDiffusionXLInpaintPipeline", 1024,
        dict(num_inference_steps=30, guidance_scale=8.0, strength=0.99,
             negative_prompt=SDXL_NEGATIVE_PROMPT),
        multiple=8, call_style="inpaint", paper="NearID App. B.1"),
    "flux_fill": BackendSpec(
        "flux_fill", "FluxFillPipeline", 1024,
        dict(num_inference_steps=50, guidance_scale=30.0, max_sequence_length=512),
        call_style="flux_fill", paper="NearID App. B.1"),
    "flux_canny": BackendSpec(
        "flux_canny", "FluxControlInpaintPipeline", 1024,
        dict(num_inference_steps=28, guidance_scale=7.0, strength=0.99, canny_low=50.0,
             canny_high=200.0, canny_sigma=1.0, max_sequence_length=512),
        call_style="flux_control", paper="NearID App. B.1"),
    "qwen_controlnet": BackendSpec(
        "qwen_controlnet", "QwenImageControlNetInpaintPipeline", 1328,
        dict(num_inference_steps=8, true_cfg_scale=1.0, controlnet_conditioning_scale=1.0,
             negative_prompt=" "),
        call_style="qwen_cn", paper="NearID App. B.1 (Lightning-8steps-V1.1)"),
    "qwen_edit": BackendSpec(
        "qwen_edit", "QwenImageEditPipeline", 1024,
        dict(num_inference_steps=8, true_cfg_scale=1.0, negative_prompt=" ",
             whiten_masked=True),
        call_style="qwen_edit", batchable=False, paper="ID-Sim App. A.2.1 / F.1"),
    "flux_fill_identity": BackendSpec(
        "flux_fill_identity", "FluxFillPipeline", 720,
        dict(num_inference_steps=50, guidance_scale=2.5, strength_range=(0.5, 0.8),
             partial_frac=(0.4, 0.6), max_sequence_length=512),
        multiple=16, call_style="flux_fill", paper="ID-Sim App. A.2.2"),
    "tiny_sd": BackendSpec(
        "tiny_sd", "StableDiffusionInpaintPipeline", 64,
        dict(num_inference_steps=4, guidance_scale=7.5, strength=0.99,
             negative_prompt="text, watermark, low resolution"),
        multiple=8, call_style="inpaint", paper="tests / throughput only"),
}


SPECS_POWERPAINT = BackendSpec(
    "powerpaint", "StableDiffusionPowerPaintBrushNetPipeline", 512,
    dict(num_inference_steps=45, guidance_scale=7.5, brushnet_conditioning_scale=1.0,
         negative_prompt="worst quality, low quality, text, watermark, lowres",
         task_prompt="P_obj"),
    multiple=8, call_style="powerpaint", paper="NearID App. B.1")

SPECS["powerpaint"] = SPECS_POWERPAINT

# NearID released source name -> (backend, working resolution)
NEARID_SOURCES: dict[str, tuple[str, int | str]] = {
    "SDXL": ("sdxl", 512), "SDXL_1024": ("sdxl", "native"),
    "Flux": ("flux_fill", 512), "Flux_1024": ("flux_fill", "native"),
    "FluxC": ("flux_canny", 512), "FluxC_1024": ("flux_canny", "native"),
    "Qwen": ("qwen_controlnet", 512), "Qwen_1328": ("qwen_controlnet", "native"),
    "PowerPaint": ("powerpaint", 512),
}



def source_backend(source: str) -> tuple[str, int | str]:
    """(backend name, resolution) of a NearID source name; raises naming the valid ones."""
    if source not in NEARID_SOURCES:
        raise KeyError(f"unknown NearID source {source!r}; valid: {', '.join(NEARID_SOURCES)}")
    return NEARID_SOURCES[source]
