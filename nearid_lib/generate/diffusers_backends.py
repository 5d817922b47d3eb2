"""Diffusers inpainting / editing pipelines behind the one fill interface.

Every backend here wraps a *real* diffusers pipeline. In the ``paper`` profile it is loaded with
``from_pretrained`` from the hub id in ``GenerateConfig.hub_ids`` (lazily, on the first fill);
anywhere else a ready pipeline object can be injected with ``pipe=...`` - that is how the tests
run the real diffusers code path on tiny random-weight pipelines offline
(:func:`~nearid_lib.generate.tiny_sd.build_tiny_sd_inpaint_pipeline`).

Registered names and their defaults (NearID Appendix B.1, ID-Sim Appendix A.2 / F.1):

| name                 | pipeline                              | native px | defaults |
|----------------------|---------------------------------------|-----------|----------|
| ``sdxl``             | StableDiffusionXLInpaintPipeline      | 1024 | 30 steps, CFG 8.0, strength 0.99, negative prompt |
| ``flux_fill``        | FluxFillPipeline                      | 1024 | 50 steps, guidance 30 |
| ``flux_canny``       | FluxControlInpaintPipeline (Canny-dev)| 1024 | 28 steps, guidance 7, strength 0.99, Canny 50/200 |
| ``qwen_controlnet``  | QwenImageControlNetInpaintPipeline + InstantX inpainting ControlNet + Lightning-8step LoRA | 1328 | 8 steps, true CFG 1.0, flow-match Euler |
| ``powerpaint``       | PowerPaint v2 / BrushNet (external; not in diffusers 0.42) | 512 | 45 steps, UniPC, CFG 7.5, conditioning 1.0 |
| ``qwen_edit``        | QwenImageEditPipeline (+ Lightning LoRA) | 1024 | 8 steps, true CFG 1.0 (ID-Sim context edits) |
| ``flux_fill_identity`` | FluxFillPipeline                    | 720 (long side) | strength U(0.5, 0.8), 50 steps, guidance 2.5, 40-60% partial masks |
| ``tiny_sd``          | StableDiffusionInpaintPipeline, random tiny weights | 64 | 4 steps, CFG 7.5 (tests, throughput) |

Resolution: ``resolution="native"`` (default) or an int (512). The input is Lanczos-resampled to
the working resolution (the mask with nearest-neighbour, so it stays binary), the pipeline runs
there, and its output is Lanczos-resampled back to the input's size, so a distractor always has
the size of the view it replaces. The NearID source names (``SDXL``, ``SDXL_1024``, ...) map to
(backend, resolution) in :data:`~nearid_lib.generate.specs.NEARID_SOURCES`; every backend's pipeline
class, defaults and call shape are in :mod:`nearid_lib.generate.specs`.

Determinism: each request gets its own CPU ``torch.Generator`` seeded with the per-item seed, also
inside a batch (diffusers draws each sample's noise from its own generator), so an item's output
does not depend on which other items share its batch or on the order of work.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from PIL import Image

from ..runtime.seeding import make_rng
from .base import FillBackend, FillRequest, register_backend, validate_fill_inputs
from .specs import DEFAULT_HUB_IDS, QWEN_LIGHTNING_SCHEDULER, SPECS, SPECS_POWERPAINT, BackendSpec
from .tiny_sd import build_tiny_sd_inpaint_pipeline

__all__ = ["DiffusersFillBackend", "PowerPaintBackend", "canny_edges", "partial_mask", "torch_dtype"]


def torch_dtype(mixed_precision: str):
    """``"no"|"fp16"|"bf16"`` (accelerate's names) -> torch dtype."""
    table = {"no": torch.float32, "fp32": torch.float32, "fp16": torch.float16,
             "bf16": torch.bfloat16}
    if mixed_precision not in table:
        raise ValueError(f"mixed_precision must be one of {sorted(table)}, got {mixed_precision!r}")
    return table[mixed_precision]


def canny_edges(image: Image.Image, low: float = 50.0, high: float = 200.0,
                sigma: float = 1.0) -> Image.Image:
    """Canny edge map as an RGB image (white edges on black), the control image of FLUX.1-Canny.

    Uses ``skimage.feature.canny`` on the grey image in 0..255 units with hysteresis thresholds
    ``low``/``high`` on the Sobel gradient magnitude - the same units as OpenCV's
    ``cv2.Canny(img, 50, 200)`` (the paper's tau_low/tau_high). Differences from OpenCV, stated so
    results are read correctly: skimage smooths with a Gaussian (``sigma``) first and uses the L2
    gradient norm (OpenCV: no smoothing, L1 norm by default), so edge maps are slightly sparser."""
    from skimage.feature import canny

    grey = np.asarray(image.convert("L"), dtype=np.float64)
    edges = canny(grey, sigma=sigma, low_threshold=low, high_threshold=high)
    arr = (edges.astype(np.uint8) * 255)
    return Image.fromarray(np.stack([arr] * 3, axis=-1), mode="RGB")


def partial_mask(mask: Image.Image, rng: np.random.Generator,
                 frac_range: tuple[float, float] = (0.4, 0.6)) -> Image.Image:
    """ID-Sim identity edits: keep a random 40-60% of the foreground, cut along a horizontal or
    vertical axis (which side is random), so the edit is a partial occlusion-like repaint.

    The cut is placed on the foreground's bounding box so that the kept fraction of the
    *bounding box extent* is ``frac``; the result is the foreground restricted to that side."""
    m = np.asarray(mask.convert("L")) >= 128
    ys, xs = np.nonzero(m)
    if len(ys) == 0:
        return mask.convert("L")
    frac = float(rng.uniform(*frac_range))
    axis = int(rng.integers(2))          # 0: cut rows (horizontal line), 1: cut columns
    side = int(rng.integers(2))          # keep the low or the high side
    lo, hi = (ys.min(), ys.max() + 1) if axis == 0 else (xs.min(), xs.max() + 1)
    cut = lo + int(round(frac * (hi - lo)))
    keep = np.zeros_like(m)
    sl = slice(lo, cut) if side == 0 else slice(hi - (cut - lo), hi)
    if axis == 0:
        keep[sl, :] = True
    else:
        keep[:, sl] = True
    out = m & keep
    if not out.any():  # degenerate tiny mask: fall back to the whole foreground
        out = m
    return Image.fromarray(out.astype(np.uint8) * 255, mode="L")


def _work_size(size: tuple[int, int], resolution: int, multiple: int) -> tuple[int, int]:
    """Working (w, h) whose longer side is ``resolution``, both divisible by ``multiple``."""
    w, h = size
    scale = resolution / max(w, h)
    fit = lambda v: max(multiple, int(round(v * scale / multiple)) * multiple)  # noqa: E731
    return fit(w), fit(h)


def _to_work(image: Image.Image, mask: Image.Image, wh: tuple[int, int]):
    if image.size == wh:
        return image, mask
    return image.resize(wh, Image.LANCZOS), mask.resize(wh, Image.NEAREST)


def _composite(original: Image.Image, generated: Image.Image, mask: Image.Image) -> Image.Image:
    """Paste the generated pixels inside the mask onto the untouched original."""
    return Image.composite(generated, original, mask.point(lambda v: 255 if v >= 128 else 0))


# --------------------------------------------------------------------------- backend
class DiffusersFillBackend(FillBackend):
    """A diffusers pipeline behind :class:`FillBackend`.

    Args:
        spec: the :class:`BackendSpec` (chosen by the registered name).
        pipe: a ready pipeline (tests: tiny random weights). ``None``: ``from_pretrained`` from
            ``hub_ids`` on first use (paper profile; needs the hub or a filled ``HF_HOME``).
        resolution: ``"native"`` or an int (e.g. 512), the longer side of the working image.
        mixed_precision: ``"no" | "fp16" | "bf16"`` - load dtype when loading from the hub.
        device: ``"auto"`` picks cuda when available.
        hub_ids: overrides of :data:`DEFAULT_HUB_IDS`.
        composite: paste the original pixels back outside the mask (off by default: the papers
            keep the pipelines' raw outputs; the drift filter then guards the background).
        **defaults: overrides of the spec's call defaults (steps, guidance, ...).
    """

    def __init__(self, spec: BackendSpec, pipe: Any = None, resolution: int | str = "native",
                 mixed_precision: str = "no", device: str = "auto",
                 hub_ids: dict[str, str] | None = None, composite: bool = False,
                 pipeline_factory: Callable[[], Any] | None = None, **defaults: Any):
        self.spec = spec
        self.name = spec.name
        self._pipe = pipe
        self._factory = pipeline_factory
        if resolution != "native" and not (isinstance(resolution, int) and resolution > 0):
            raise ValueError(f"{spec.name}: resolution must be 'native' or a positive int, "
                             f"got {resolution!r}")
        self.resolution = spec.native_resolution if resolution == "native" else int(resolution)
        self.mixed_precision = mixed_precision
        self.device = device
        self.hub_ids = {**DEFAULT_HUB_IDS, **(hub_ids or {})}
        self.composite = composite
        unknown = set(defaults) - set(spec.defaults) - {"height", "width"}
        if unknown:
            raise TypeError(f"{spec.name}: unknown settings {sorted(unknown)}; "
                            f"valid: {sorted(spec.defaults)}")
        self.defaults = {**spec.defaults, **defaults}

    # ---------------------------------------------------------------- loading
    @property
    def pipe(self):
        if self._pipe is None:
            self._pipe = self._factory() if self._factory else self.load_pipeline()
        return self._pipe

    def _resolve_device(self) -> str:
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device

    def load_pipeline(self):
        """``from_pretrained`` with the paper's components (paper profile only; never in tests)."""
        import diffusers

        dtype = torch_dtype(self.mixed_precision)
        cls = getattr(diffusers, self.spec.pipeline_cls)
        hub = self.hub_ids
        name = self.spec.name
        if name == "qwen_controlnet":
            controlnet = diffusers.QwenImageControlNetModel.from_pretrained(
                hub["qwen_controlnet.controlnet"], torch_dtype=dtype)
            pipe = cls.from_pretrained(hub[name], controlnet=controlnet, torch_dtype=dtype)
        else:
            pipe = cls.from_pretrained(hub[name], torch_dtype=dtype)
        if f"{name}.lora" in hub:  # Lightning LoRA: fuse, then the 8-step flow-match schedule
            pipe.scheduler = diffusers.FlowMatchEulerDiscreteScheduler.from_config(
                QWEN_LIGHTNING_SCHEDULER)
            pipe.load_lora_weights(hub[f"{name}.lora"], weight_name=hub[f"{name}.lora_weight"])
            pipe.fuse_lora()
        pipe = pipe.to(self._resolve_device())
        pipe.set_progress_bar_config(disable=True)
        return pipe

    # ---------------------------------------------------------------- fill
    def fill(self, image: Image.Image, mask: Image.Image, prompt: str, seed: int,
             **settings: Any) -> Image.Image:
        return self.fill_batch([FillRequest("item", image, mask, prompt, seed, settings)])[0]

    def fill_batch(self, requests: list[FillRequest]) -> list[Image.Image]:
        """Run the requests; consecutive ones with the same working size and settings share one
        pipeline call (each with its own generator)."""
        outs: list[Image.Image | None] = [None] * len(requests)
        groups: dict[Any, list[int]] = {}
        prepared = []
        for i, r in enumerate(requests):
            image, mask = validate_fill_inputs(r.image, r.mask, where=f"item {r.item_id!r}")
            s = {**self.defaults, **r.settings}
            unknown = set(r.settings) - set(self.spec.defaults) - {"height", "width"}
            if unknown:
                raise TypeError(f"item {r.item_id!r}: {self.name} got unknown settings "
                                f"{sorted(unknown)}; valid: {sorted(self.spec.defaults)}")
            prepared.append(self._prepare(r, image, mask, s))
            key = (prepared[-1]["wh"], repr(sorted((k, repr(v)) for k, v in prepared[-1]["call"].items())))
            if not self.spec.batchable:
                key = (i,)
            groups.setdefault(key, []).append(i)
        for idx in groups.values():
            results = self._run([prepared[i] for i in idx])
            for i, res in zip(idx, results):
                p = prepared[i]
                res = res.convert("RGB")
                if res.size != p["orig_size"]:
                    res = res.resize(p["orig_size"], Image.LANCZOS)
                if self.composite:
                    res = _composite(p["orig_image"], res, p["orig_mask"])
                outs[i] = res
        return outs  # type: ignore[return-value]

    def _prepare(self, r: FillRequest, image: Image.Image, mask: Image.Image,
                 s: dict[str, Any]) -> dict[str, Any]:
        wh = (s.pop("width", None), s.pop("height", None))
        if wh[0] is None or wh[1] is None:
            wh = _work_size(image.size, self.resolution, self.spec.multiple)
        call = dict(s)
        seed = int(r.seed)
        orig_mask = mask
        if self.spec.name == "flux_fill_identity":
            # Per-item parameter sampling (strength, partial mask) from the item's own seed.
            rng = make_rng(seed, "flux_fill_identity")
            lo, hi = call.pop("strength_range")
            call["strength"] = round(float(rng.uniform(lo, hi)), 4)
            mask = partial_mask(mask, rng, tuple(call.pop("partial_frac")))
            orig_mask = mask
        w_img, w_mask = _to_work(image, mask, wh)
        extra: dict[str, Any] = {}
        if self.spec.call_style == "flux_control":
            extra["control_image"] = canny_edges(
                w_img, call.pop("canny_low"), call.pop("canny_high"), call.pop("canny_sigma"))
        if self.spec.call_style == "qwen_edit" and call.pop("whiten_masked"):
            # ID-Sim: the region to re-create is replaced by a white canvas before editing.
            white = Image.new("RGB", w_img.size, (255, 255, 255))
            w_img = _composite(w_img, white, w_mask)
        return dict(prompt=r.prompt, image=w_img, mask=w_mask, wh=wh, seed=seed, call=call,
                    extra=extra, orig_size=image.size, orig_image=image, orig_mask=orig_mask)

    def _run(self, items: list[dict[str, Any]]) -> list[Image.Image]:
        style = self.spec.call_style
        w, h = items[0]["wh"]
        call = dict(items[0]["call"])
        gens = [torch.Generator("cpu").manual_seed(it["seed"]) for it in items]
        prompts = [it["prompt"] for it in items]
        kw: dict[str, Any] = dict(prompt=prompts, height=h, width=w, generator=gens)
        neg = call.pop("negative_prompt", None)
        if style == "inpaint":
            kw.update(image=[it["image"] for it in items], mask_image=[it["mask"] for it in items])
            if neg is not None:
                kw["negative_prompt"] = [neg] * len(items)
        elif style == "flux_fill":
            kw.update(image=[it["image"] for it in items], mask_image=[it["mask"] for it in items])
        elif style == "flux_control":
            kw.update(image=[it["image"] for it in items], mask_image=[it["mask"] for it in items],
                      control_image=[it["extra"]["control_image"] for it in items])
        elif style == "qwen_cn":
            kw.update(control_image=[it["image"] for it in items],
                      control_mask=[it["mask"] for it in items])
            if neg is not None:
                kw["negative_prompt"] = [neg] * len(items)
        elif style == "qwen_edit":
            kw.update(image=items[0]["image"], prompt=prompts[0], generator=gens[0])
            if neg is not None:
                kw["negative_prompt"] = neg
        else:  # pragma: no cover - specs are fixed above
            raise ValueError(f"unknown call style {style!r}")
        kw.update(call)
        with torch.inference_mode():
            result = self.pipe(**kw)
        return list(result.images)


class PowerPaintBackend(DiffusersFillBackend):
    """PowerPaint v2 (BrushNet v2.1 on Realistic Vision 6.0): a documented plug-in point.

    diffusers 0.42 ships no BrushNet/PowerPaint pipeline (no ``BrushNetModel``, no
    ``StableDiffusionPowerPaintBrushNetPipeline``). To generate the ``PowerPaint`` source, build
    the pipeline from the PowerPaint repository yourself and hand it in::

        pipe = StableDiffusionPowerPaintBrushNetPipeline.from_pretrained(...)   # PowerPaint repo
        pipe.scheduler = UniPCMultistepScheduler.from_config(pipe.scheduler.config)
        backend = get_backend("powerpaint", pipe=pipe)            # or pipeline_factory=callable

    It is then called with the paper's settings (45 steps, CFG 7.5, ``brushnet_conditioning_scale``
    1.0) and the task prompt of text-guided object synthesis. Any callable ``pipe(prompt=...,
    image=..., mask=..., generator=..., **settings) -> obj.images`` works, so other external
    pipelines can be registered the same way with ``register_backend``."""

    def __init__(self, pipe: Any = None, **kw: Any):
        super().__init__(SPECS_POWERPAINT, pipe=pipe, **kw)

    def load_pipeline(self):
        raise NotImplementedError(
            "powerpaint: diffusers 0.42 has no BrushNet/PowerPaint pipeline. Build "
            "StableDiffusionPowerPaintBrushNetPipeline from the PowerPaint repository "
            f"(checkpoint {self.hub_ids['powerpaint']!r} on {self.hub_ids['powerpaint.base']!r}) "
            "with a UniPCMultistepScheduler and pass it as get_backend('powerpaint', pipe=...) "
            "or pipeline_factory=...; see nearid_lib.generate.diffusers_backends.PowerPaintBackend.")

    def _run(self, items: list[dict[str, Any]]) -> list[Image.Image]:
        w, h = items[0]["wh"]
        call = dict(items[0]["call"])
        neg = call.pop("negative_prompt")
        task_prompt = call.pop("task_prompt")
        gens = [torch.Generator("cpu").manual_seed(it["seed"]) for it in items]
        kw = dict(prompt=[f"{p} {task_prompt}".strip() for p in (it["prompt"] for it in items)],
                  negative_prompt=[neg] * len(items), image=[it["image"] for it in items],
                  mask=[it["mask"] for it in items], height=h, width=w, generator=gens, **call)
        with torch.inference_mode():
            return list(self.pipe(**kw).images)


def _factory(spec_name: str):
    def make(**kw: Any) -> DiffusersFillBackend:
        if spec_name == "tiny_sd" and kw.get("pipe") is None and kw.get("pipeline_factory") is None:
            kw["pipe"] = build_tiny_sd_inpaint_pipeline(kw.pop("pipe_seed", 0))
        return DiffusersFillBackend(SPECS[spec_name], **kw)
    make.__name__ = f"make_{spec_name}"
    make.__doc__ = f"Fill backend {spec_name!r}: {SPECS[spec_name].pipeline_cls}."
    return make


for _name in ("sdxl", "flux_fill", "flux_canny", "qwen_controlnet", "qwen_edit",
              "flux_fill_identity", "tiny_sd"):
    register_backend(_name)(_factory(_name))
register_backend("powerpaint")(PowerPaintBackend)
