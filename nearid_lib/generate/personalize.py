"""The personalization methods of Finer-Personalization Rank, run with the real diffusers pipelines
the FPR paper configures (Sec. 4 "Models", Supp. Tables 3-4 and the "hyperparameters" text).

| key               | method (paper)        | pipeline (diffusers)                              | guidance | steps |
|-------------------|-----------------------|---------------------------------------------------|----------|-------|
| ``dreambooth``    | DreamBooth, SD 3.0 M  | ``StableDiffusion3Pipeline`` + fine-tuned transformer (:mod:`.dreambooth`) | 5.0 | 30 |
| ``ip_adapter``    | IP-Adapter ViT-G      | ``StableDiffusionXLPipeline`` + ``load_ip_adapter`` (``sdxl_models/ip-adapter_sdxl``), scale 0.6 | 5.0 | 50 |
| ``ip_adapter_plus`` | IP-Adapter-Plus ViT-H | the same with ``ip-adapter-plus_sdxl_vit-h`` and the ViT-H image encoder | 5.0 | 50 |
| ``flux_kontext``  | FLUX.1 Kontext        | ``FluxKontextPipeline`` (``FLUX.1-Kontext-dev``)   | 5.0 | 30 |
| ``diptych``       | Diptych Prompting     | ``FluxFillPipeline`` (``FLUX.1-Fill-dev``): reference left, right panel inpainted | 3.5 | 30 |
| ``emu2``, ``ominicontrol`` | Emu2, OminiControl | not in diffusers: read from the user's folder only | 3.0 / 3.5 | 50 / 30 |

Facts taken from the FPR authors' generation scripts where the paper is silent: ten prompts per
subject (one image each; :func:`fpr_prompts`), the class word in them (the species, the CUB group,
"car"), a reference drawn per prompt from the subject's reference set and resized to 512 x 512 for
IP-Adapter and Kontext, the negative prompt of the paper's supplement, and the diptych's 768 px
panels with an 8 px margin and its prompt template.

Deviations, stated so results are read correctly:

- **Diptych** runs on ``FluxFillPipeline`` (what diffusers ships). The authors ran FLUX.1-dev with
  the alimama inpainting ControlNet in their own pipeline, with the method's attention re-weighting
  (x1.3 on the right panel's attention to the left) and a Grounding-DINO + SAM cut-out of the
  reference; none of the three is in diffusers, so all three are left out here; FluxFill takes no
  negative prompt.
- **FLUX Kontext** gets the negative prompt as the authors passed it, i.e. with ``true_cfg_scale``
  at its default 1.0, where diffusers ignores it.
- **Seeds** are per image, ``derive_seed(method, dataset, subject, i, base=seed)`` (the authors
  seed one global sequence), so an image does not depend on the order or sharding of the work.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from ..hub import model_source, note_load
from .diffusers_backends import torch_dtype

__all__ = ["NEGATIVE_PROMPT", "PROMPTS", "MethodSpec", "METHODS", "GENERATED_HERE", "USER_ONLY", "method_key",
           "prompt_type", "class_word", "fpr_prompts", "load_method_pipeline", "generate_image", "diptych_inputs"]

# FPR Supp. "hyperparameters": IP-Adapter, IP-Adapter-Plus, Diptych and Kontext
NEGATIVE_PROMPT = ("low quality, cropped, deformed, text, ugly, blurry, zoomed in, cartoony, unrealistic, lowres, "
                   "not showing whole subject, animated")

# The authors' ten prompts per dataset type ("{c}": the class word; DreamBooth puts "sks {c}").
# Their spelling is kept ("backgorund"): these are the prompts the published numbers were made with.
PROMPTS: dict[str, tuple[str, ...]] = {
    "reid": ("a {c} in a grassy field", "a photo of a {c} on the beach", "a {c} on a cobblestone street",
             "a photo of a {c} with a mountain in the backgorund", "a {c} laying down on the beach",
             "a {c} in a puddle", "a {c} in the forest",
             "a photo of a {c} sitting down with a mountain in the background",
             "a {c} running with tall grass in the background", "a {c} walking on a dirt road"),
    "cub": ("a photo of a {c} on a tree branch", "a {c} on the beach", "a photo of a {c} on a fence",
            "a {c} with a mountain in the backgorund", "a photo of a {c} perched on a rock inside a forest",
            "a {c} in a puddle", "a photo of a {c} flying in the sky", "a {c} perched with a mountain in the background",
            "a photo of a {c} perched with tall grass in the background", "a {c} flying over water"),
    "car": ("a photo of a {c} on a dirt road", "a {c} in front of a house",
            "a photo of a {c} driving down a dirt road with mountains in the distance",
            "a {c} driving down a mountain road while it is raining",
            "a photo of a {c} driving on a snowy road in the mountains", "a {c} in front of a mountain",
            "a photo of a {c} parked on a cliff overlooking the ocean", "a {c} driving fast on a racetrack",
            "a photo of a {c} parked on the beach in front of the sea", "a {c} parked inside a shipping crate"),
}
# the one prompt the authors' DreamBooth list words differently
_DREAMBOOTH_CAR0 = "a photo of a {c} on a dirt road sided by cornfields"


@dataclass(frozen=True)
class MethodSpec:
    """One personalization method: its table name, pipeline and the paper's inference settings."""

    name: str                               # the FPR tables' method name
    pipeline: str | None                    # diffusers class (None: not runnable here)
    base: str | None = None                 # hub repo of the base model
    guidance: float = 5.0
    steps: int = 30
    negative: bool = False                  # the paper's negative prompt
    ref_px: int | None = None               # reference resized to ref_px x ref_px
    adapter: tuple[str, str, str, str] | None = None   # (repo, subfolder, weight file, image-encoder folder)
    adapter_scale: float = 0.6
    call: dict[str, Any] = field(default_factory=dict)

    @property
    def repos(self) -> tuple[str, ...]:
        """Hub repositories this method reads."""
        return tuple(r for r in (self.base, self.adapter[0] if self.adapter else None) if r)


_IPA = "h94/IP-Adapter"
METHODS: dict[str, MethodSpec] = {
    "dreambooth": MethodSpec("DreamBooth", "StableDiffusion3Pipeline", "stabilityai/stable-diffusion-3-medium-diffusers",
                             5.0, 30),
    "ip_adapter": MethodSpec("IP Adapter", "StableDiffusionXLPipeline", "stabilityai/stable-diffusion-xl-base-1.0",
                             5.0, 50, True, 512, (_IPA, "sdxl_models", "ip-adapter_sdxl.safetensors", "image_encoder")),
    "ip_adapter_plus": MethodSpec("IP Adapter Plus", "StableDiffusionXLPipeline",
                                  "stabilityai/stable-diffusion-xl-base-1.0", 5.0, 50, True, 512,
                                  (_IPA, "sdxl_models", "ip-adapter-plus_sdxl_vit-h.safetensors", "models/image_encoder")),
    "flux_kontext": MethodSpec("Flux Kontext", "FluxKontextPipeline", "black-forest-labs/FLUX.1-Kontext-dev",
                               5.0, 30, True, 512),
    "diptych": MethodSpec("Diptych", "FluxFillPipeline", "black-forest-labs/FLUX.1-Fill-dev", 3.5, 30,
                          call={"panel": 768, "margin": 8}),
    "emu2": MethodSpec("Emu2", None, guidance=3.0, steps=50),
    "ominicontrol": MethodSpec("OminiControl", None, guidance=3.5, steps=30),
}
GENERATED_HERE = tuple(k for k, s in METHODS.items() if s.pipeline)
USER_ONLY = tuple(k for k, s in METHODS.items() if not s.pipeline)


def method_key(name: str) -> str:
    """The method key of a folder or table name (``"IP-Adapter"``, ``"IP Adapter"``,
    ``"ip_adapter"`` -> ``"ip_adapter"``); an unknown name maps to its own normalised form."""
    norm = "".join(ch for ch in str(name).lower() if ch.isalnum())
    for k, s in METHODS.items():
        if norm in ("".join(ch for ch in k if ch.isalnum()), "".join(ch for ch in s.name.lower() if ch.isalnum())):
            return k
    return norm


def prompt_type(dataset: str) -> str:
    """The authors' prompt set of an FPR dataset key: ``cub_*`` -> cub, ``stanford_cars`` -> car,
    the WildlifeReID-10k species -> reid."""
    return "cub" if dataset.startswith("cub_") else ("car" if dataset == "stanford_cars" else "reid")


def class_word(dataset: str) -> str:
    """The class word of the prompts: the CUB group (``sparrow``), ``car``, or the species."""
    t = prompt_type(dataset)
    return dataset[len("cub_"):] if t == "cub" else ("car" if t == "car" else dataset)


def fpr_prompts(dataset: str, token: str | None = None) -> list[str]:
    """The ten prompts of dataset key ``dataset``; with ``token`` (DreamBooth) ``"sks <class>"``."""
    t, c = prompt_type(dataset), class_word(dataset)
    tmpl = list(PROMPTS[t])
    if token:
        if t == "car":
            tmpl[0] = _DREAMBOOTH_CAR0
        c = f"{token} {c}"
    return [p.format(c=c) for p in tmpl]


def load_method_pipeline(key: str, device: str | torch.device = "cuda", mixed_precision: str = "bf16"):
    """The method's pipeline ``from_pretrained`` from the hub mirror (:func:`nearid_lib.hub.model_source`),
    IP-Adapter weights and image encoder loaded with ``load_ip_adapter`` at the paper's scale 0.6."""
    import diffusers

    spec = METHODS[key]
    if spec.pipeline is None:
        raise ValueError(f"{spec.name} is not in diffusers: put its images in the user folder (README, 'FPR data')")
    src, kw = model_source(spec.base)
    note_load(spec.base, f"{spec.name} pipeline")
    pipe = getattr(diffusers, spec.pipeline).from_pretrained(src, torch_dtype=torch_dtype(mixed_precision), **kw)
    if spec.adapter is not None:
        repo, sub, weight, enc = spec.adapter
        asrc, _ = model_source(repo)
        note_load(repo, f"{spec.name} adapter")
        pipe.load_ip_adapter(asrc, subfolder=sub, weight_name=weight, image_encoder_folder=enc)
        pipe.set_ip_adapter_scale(spec.adapter_scale)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def diptych_inputs(reference: Image.Image, panel: int, margin: int) -> tuple[Image.Image, Image.Image]:
    """``(canvas, mask)`` of Diptych Prompting: the reference in the left panel, the right panel to
    inpaint (white in the mask); panels of ``panel + 2 * margin`` px."""
    side = panel + 2 * margin
    canvas = Image.new("RGB", (2 * side, side))
    canvas.paste(reference.convert("RGB").resize((side, side), Image.LANCZOS), (0, 0))
    mask = Image.new("L", (2 * side, side), 0)
    mask.paste(255, (side, 0, 2 * side, side))
    return canvas, mask


def generate_image(key: str, pipe, prompt: str, reference: Image.Image | None, seed: int, *,
                   cls: str = "subject", px: int | None = None, steps: int | None = None) -> Image.Image:
    """One image of method ``key`` for ``prompt`` (and ``reference``, for the zero-shot methods;
    ``cls``, the class word, names the subject in the diptych's prompt), from a CPU generator
    seeded with ``seed``. ``px`` / ``steps`` override the native resolution
    and the paper's step count (the dry run's tiny pipelines); DreamBooth's pipe must already hold
    the subject's fine-tuned transformer (:func:`~nearid_lib.generate.dreambooth.apply_dreambooth`)."""
    spec = METHODS[key]
    g = torch.Generator("cpu").manual_seed(int(seed))
    n = int(steps or spec.steps)
    size = {"height": px, "width": px} if px else {}
    kw: dict[str, Any] = {"num_inference_steps": n, "guidance_scale": spec.guidance, "generator": g}
    if spec.negative and key != "diptych":
        kw["negative_prompt"] = NEGATIVE_PROMPT
    ref = None
    if reference is not None and spec.ref_px:
        ref = reference.convert("RGB").resize((px or spec.ref_px,) * 2, Image.LANCZOS)
    if key == "dreambooth":
        return pipe(prompt=prompt, **size, **kw).images[0]
    if key in ("ip_adapter", "ip_adapter_plus"):
        return pipe(prompt=prompt, ip_adapter_image=ref, **size, **kw).images[0]
    if key == "flux_kontext":
        extra = {"_auto_resize": False, "max_area": px * px, **size} if px else {}
        return pipe(image=ref, prompt=prompt, **extra, **kw).images[0]
    if key == "diptych":
        panel, margin = (px or spec.call["panel"]), spec.call["margin"]
        canvas, mask = diptych_inputs(reference, panel, margin)
        text = (f"A diptych with two side-by-side images of same {cls}. On the left, a photo of {cls}. "
                f"On the right, replicate this {cls} exactly but as {prompt}")
        side = panel + 2 * margin
        out = pipe(prompt=text, image=canvas, mask_image=mask, height=side, width=2 * side, **kw).images[0]
        return out.crop((side + margin, margin, 2 * side - margin, side - margin))
    raise ValueError(f"{spec.name}: no pipeline in diffusers; its images come from the user's folder")
