"""DreamBooth fine-tuning of Stable Diffusion 3, the FPR paper's only fine-tuned personalization method.

Per subject the SD3 transformer learns the subject's photos under ``"a photo of sks {class}"`` and,
with prior preservation, base-model images of ``"a photo of a {class}"`` (:func:`generate_class_images`)
with SD3's rectified-flow objective. :class:`DreamBoothConfig`'s defaults are the authors' settings
(the whole transformer trained); ``mode="lora"`` trains a peft LoRA instead (cheaper; not the paper's).
Every random draw of step ``s`` comes from a generator seeded by ``(seed, s)``, so a run resumed from
``out_dir/resume/step_XXXXXXX/`` is bit-identical on CPU to an uninterrupted one. A finished run is
``weights.safetensors`` + ``dreambooth.json``; :func:`apply_dreambooth` loads it and
:func:`restore_base` returns the pipeline to its :func:`base_state`, so one pipeline serves all subjects.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..io_utils import atomic_save_image, atomic_write, atomic_write_text
from ..runtime.seeding import derive_seed

__all__ = ["LORA_TARGETS", "RECORD_FILE", "TRAINING_MEMORY", "WEIGHTS_FILE", "DreamBoothConfig", "DreamBoothResult",
           "apply_dreambooth", "base_state", "class_prompt", "generate_class_images", "instance_prompt",
           "restore_base", "run_key", "train_dreambooth"]

WEIGHTS_FILE = "weights.safetensors"     # a finished run's trained tensors
RECORD_FILE = "dreambooth.json"          # its config, steps and loss history
ADAPTER = "dreambooth"                   # the peft adapter name of mode="lora"
LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
_DENSITY = {"logit_mean": 0.0, "logit_std": 1.0, "mode_scale": 1.29}   # SD3's timestep density
_ADAMW = {"betas": (0.9, 0.999), "weight_decay": 1e-4, "eps": 1e-8}     # diffusers' DreamBooth defaults
# What a full run holds on its GPU, per trained parameter and beside them (the resource ledger reads
# it): the fp32 master weights (4 bytes), their gradients (4) and AdamW's two moments (8); the bf16
# copies autocast makes in the forward pass (2) are gone before the gradients exist, so the peak is
# the backward's 16. Beside them: the VAE (bf16), one checkpointed block's recomputed activations and
# the VAE's encoding of a step's images at 768 px. The text encoders (T5-XXL alone is 9.5 GB) leave
# the GPU once the two prompts are embedded, as diffusers' script drops them.
TRAINING_MEMORY = {"bytes_per_trained_param": 16, "resident_bytes_per_param": 4,
                   "beside_bytes": int(4e9), "basis": "fp32 weights + gradients + AdamW moments; "
                   "text encoders off the GPU; gradient checkpointing; a block's activations and the VAE"}


@dataclass
class DreamBoothConfig:
    """One subject's DreamBooth run; the defaults are the FPR authors' settings.

    ``mode``: ``"full"`` (every transformer parameter, the authors' choice) or ``"lora"`` (a LoRA of
    rank ``lora_rank``, alpha = rank, on :data:`LORA_TARGETS`). ``checkpoint_every``: steps between
    resumable states (0 = none before the end; a full SD3-Medium state is ~8 GB of fp32 weights plus
    twice that of AdamW moments). ``mixed_precision``: ``"bf16"`` autocasts the forward pass on CUDA
    (the trained tensors stay fp32); on CPU, and with ``"no"``, training is fp32.
    ``max_sequence_length``: T5 tokens of the prompt embedding (77, diffusers' DreamBooth SD3
    default). AdamW (betas 0.9/0.999, decay 1e-4, eps 1e-8), the gradient-norm clip and the timestep
    density (logit-normal 0/1) are diffusers' DreamBooth SD3 defaults too. ``gradient_checkpointing``
    recomputes each transformer block's activations in the backward pass instead of keeping them
    (diffusers' ``--gradient_checkpointing``): the same gradients, less memory; it is not part of
    :func:`run_key`. What a full run holds on one GPU: :data:`TRAINING_MEMORY`."""

    steps: int = 800
    lr: float = 5e-6
    batch_size: int = 1
    resolution: int = 768
    prior_weight: float = 0.5
    with_prior: bool = True
    mode: str = "full"
    lora_rank: int = 16
    token: str = "sks"
    checkpoint_every: int = 0
    seed: int = 0
    mixed_precision: str = "bf16"
    weighting_scheme: str = "logit_normal"
    max_sequence_length: int = 77
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("full", "lora") or self.mixed_precision not in ("bf16", "no"):
            raise ValueError(f"DreamBoothConfig: mode must be 'full' or 'lora' (not {self.mode!r}), "
                             f"mixed_precision 'bf16' or 'no' (not {self.mixed_precision!r})")
        if min(self.steps, self.batch_size, self.resolution, self.lora_rank) < 1:
            raise ValueError("DreamBoothConfig: steps, batch_size, resolution and lora_rank must be >= 1")


@dataclass
class DreamBoothResult:
    """What :func:`train_dreambooth` did: ``steps`` taken in all (``cfg.steps`` once finished),
    ``resumed_from`` (the step it started at: ``cfg.steps`` for a run that was already finished),
    the per-step ``history`` (``loss``, ``instance`` and, with prior preservation, ``class``)."""

    out_dir: Path | None
    steps: int
    resumed_from: int
    finished: bool
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    weights: Path | None = None


def instance_prompt(token: str, cls: str) -> str:
    """The subject's prompt: ``"a photo of sks dog"``."""
    return f"a photo of {token} {cls}"


def class_prompt(cls: str) -> str:
    """The prior-preservation prompt: ``"a photo of a dog"``."""
    return f"a photo of a {cls}"


def _image_digest(images) -> str:
    h = hashlib.sha1()
    for im in images or ():
        h.update(f"{im.mode}:{im.size}|".encode() + im.tobytes())
    return h.hexdigest()[:12]


def run_key(pipe, instance_images, cls: str, class_images, cfg: DreamBoothConfig) -> str:
    """Hash of what a run's weights depend on: the config (less ``checkpoint_every``), the class, the
    images and the transformer's config (its ``_name_or_path`` included). Resume states and finished
    runs of another key are not used (``gradient_checkpointing`` changes memory, not weights)."""
    c = {k: v for k, v in asdict(cfg).items() if k not in ("checkpoint_every", "gradient_checkpointing")}
    model = {k: v for k, v in dict(pipe.transformer.config).items() if not k.startswith("_") or k == "_name_or_path"}
    part = {"config": c, "class": cls, "instance": _image_digest(instance_images),
            "class_images": _image_digest(class_images) if cfg.with_prior else None, "model": model}
    return hashlib.sha1(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _drop_adapter(transformer) -> None:
    """Remove the DreamBooth adapter (all peft layers when it is the only adapter)."""
    names = set(getattr(transformer, "peft_config", None) or {})
    if names == {ADAPTER}:
        transformer.unload_lora()
    elif ADAPTER in names:
        transformer.delete_adapters(ADAPTER)


def _trained(transformer, mode: str) -> dict[str, torch.Tensor]:
    """The trained tensors (CPU, contiguous): the adapter's (peft's names) or every parameter."""
    from peft import get_peft_model_state_dict

    sd = (get_peft_model_state_dict(transformer, adapter_name=ADAPTER) if mode == "lora"
          else dict(transformer.named_parameters()))
    return {k: v.detach().cpu().contiguous() for k, v in sd.items()}


def _load_trained(transformer, mode: str, tensors: dict[str, torch.Tensor]) -> None:
    from peft import set_peft_model_state_dict

    bad = (set_peft_model_state_dict(transformer, tensors, adapter_name=ADAPTER) if mode == "lora"
           else transformer.load_state_dict(tensors, strict=False)).unexpected_keys
    if bad:
        raise ValueError(f"DreamBooth weights do not fit this transformer: {bad[:3]}")


def _add_adapter(transformer, rank: int, seed: int) -> None:
    """Add a fresh LoRA (alpha = rank, gaussian init drawn from ``seed``) on :data:`LORA_TARGETS`."""
    from peft import LoraConfig

    _drop_adapter(transformer)
    with torch.random.fork_rng(devices=[]):       # the init draws from the global RNG
        torch.manual_seed(derive_seed("dreambooth-lora-init", base=seed))
        transformer.add_adapter(LoraConfig(r=rank, lora_alpha=rank, init_lora_weights="gaussian",
                                           target_modules=list(LORA_TARGETS)), adapter_name=ADAPTER)


def base_state(pipe) -> dict[str, torch.Tensor]:
    """A CPU copy of the transformer's base weights (take it once, before any subject), for
    :func:`restore_base`. Only ``mode="full"`` needs it: removing a LoRA restores the base."""
    tr = pipe.transformer
    if ADAPTER in (getattr(tr, "peft_config", None) or {}):
        raise ValueError("base_state: the transformer holds a DreamBooth adapter; call restore_base first")
    return {k: v.detach().to("cpu", copy=True) for k, v in tr.state_dict().items()}


def restore_base(pipe, snapshot: dict[str, torch.Tensor] | None = None) -> None:
    """Return ``pipe.transformer`` to its base weights: drop the DreamBooth adapter and, given a
    :func:`base_state` snapshot, load it (needed after a ``mode="full"`` run)."""
    tr = pipe.transformer
    _drop_adapter(tr)
    if snapshot is not None:
        tr.load_state_dict(snapshot, strict=True)
    tr.requires_grad_(False).eval()


def _finished(out: Path) -> bool:
    return (out / WEIGHTS_FILE).exists() and (out / RECORD_FILE).exists()


def apply_dreambooth(pipe, out_dir: str | os.PathLike) -> dict:
    """Load the finished run in ``out_dir`` into ``pipe.transformer`` (for inference); returns its
    record (``dreambooth.json``). A ``mode="full"`` run replaces every transformer parameter (take a
    :func:`base_state` first to get the base back), a ``mode="lora"`` run (re)adds the adapter."""
    out = Path(out_dir)
    if not _finished(out):
        raise FileNotFoundError(f"{out}: no finished DreamBooth run ({WEIGHTS_FILE} + {RECORD_FILE})")
    rec = json.loads((out / RECORD_FILE).read_text())
    tr, c = pipe.transformer, rec["config"]
    if c["mode"] == "lora":
        _add_adapter(tr, int(c["lora_rank"]), 0)      # its weights all come from the file
    else:
        _drop_adapter(tr)
    with torch.no_grad():
        _load_trained(tr, c["mode"], load_file(str(out / WEIGHTS_FILE)))
    tr.requires_grad_(False).eval()
    return rec


def _resize(image: Image.Image, res: int) -> Image.Image:
    """Shorter side to ``res`` (bilinear, as torchvision's ``Resize(res)``), RGB."""
    im = ImageOps.exif_transpose(image).convert("RGB")
    size = tuple(max(res, int(d * res / min(im.size))) for d in im.size)
    return im.resize(size, Image.BILINEAR) if size != im.size else im


def _crop(im: Image.Image, res: int, g: torch.Generator) -> torch.Tensor:
    """A random ``res`` x ``res`` crop as a CHW tensor in [-1, 1]."""
    top, left = (int(torch.randint(0, d - res + 1, (1,), generator=g)) for d in im.size[::-1])
    arr = np.asarray(im.crop((left, top, left + res, top + res)), dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(arr).permute(2, 0, 1)


@torch.no_grad()
def _embed(pipe, cls: str, cfg: DreamBoothConfig, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings of the instance (then the class) prompt, ``batch_size`` copies each: a step's order."""
    prompts = [instance_prompt(cfg.token, cls)] + ([class_prompt(cls)] if cfg.with_prior else [])
    emb, _, pooled, _ = pipe.encode_prompt(prompt=prompts, prompt_2=None, prompt_3=None, device=device,
                                           num_images_per_prompt=cfg.batch_size,
                                           do_classifier_free_guidance=False,
                                           max_sequence_length=cfg.max_sequence_length)
    return emb, pooled


def _text_encoders(pipe) -> list:
    return [m for m in (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3) if m is not None]


def _park_text_encoders(pipe, device) -> list:
    """Move the text encoders off a CUDA ``device`` to the CPU (the prompts are embedded once, before
    training); returns the ones moved, for :func:`_unpark`. Nothing moves on the CPU."""
    if torch.device(device).type != "cuda":
        return []
    moved = [m for m in _text_encoders(pipe) if next(m.parameters()).device.type == "cuda"]
    for m in moved:
        m.to("cpu")
    torch.cuda.empty_cache()
    return moved


def _unpark(moved: list, device) -> None:
    for m in moved:
        m.to(device)


def _step_losses(pipe, sched, cfg: DreamBoothConfig, g: torch.Generator, pix: list[torch.Tensor], emb, pooled,
                 wdtype: torch.dtype, amp: bool) -> torch.Tensor:
    """Per-image SD3 flow-matching losses of one step; the VAE sample, noise and timesteps from ``g``."""
    from diffusers import training_utils as dtu

    vae, device = pipe.vae, emb.device
    x = torch.stack(pix).to(device=device, dtype=vae.dtype)
    n = x.shape[0]
    with torch.no_grad():
        lat = vae.encode(x).latent_dist.sample(generator=g).float()
    lat = (lat - float(getattr(vae.config, "shift_factor", None) or 0.0)) * float(vae.config.scaling_factor)
    noise = torch.randn(lat.shape, generator=g).to(device)
    u = dtu.compute_density_for_timestep_sampling(cfg.weighting_scheme, n, generator=g, **_DENSITY)
    idx = (u * sched.config.num_train_timesteps).long().clamp_(0, len(sched.timesteps) - 1)
    sigmas = sched.sigmas[idx].to(device=device, dtype=torch.float32).view(n, 1, 1, 1)
    noisy = (1.0 - sigmas) * lat + sigmas * noise
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = pipe.transformer(hidden_states=noisy.to(wdtype), timestep=sched.timesteps[idx].to(device),
                                encoder_hidden_states=emb, pooled_projections=pooled, return_dict=False)[0]
    pred = pred.float() * (-sigmas) + noisy            # preconditioned: a prediction of the latents
    weight = dtu.compute_loss_weighting_for_sd3(weighting_scheme=cfg.weighting_scheme, sigmas=sigmas)
    return (weight.float() * (pred - lat) ** 2).reshape(n, -1).mean(1)


def _save_state(rdir: Path, step: int, tensors: dict, opt, extra: dict) -> None:
    """Atomically write ``rdir/step_XXXXXXX`` (trained tensors in ``trained.safetensors``, AdamW
    state and torch RNG in ``optim.safetensors``, step + ``extra`` in JSON); keep only the newest."""
    final, tmp = rdir / f"step_{step:07d}", rdir / f".step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "trained.safetensors"))
    ot = {"rng.torch": torch.get_rng_state()}
    ot.update({f"opt.{pid}.{k}": torch.as_tensor(v).detach().cpu().contiguous()
               for pid, st in opt.state_dict()["state"].items() for k, v in st.items()})
    save_file(ot, str(tmp / "optim.safetensors"))
    (tmp / "state.json").write_text(json.dumps({"step": step, **extra}))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in set(rdir.glob("step_*")) - {final}:
        shutil.rmtree(old, ignore_errors=True)


def _load_state(path: Path, transformer, mode: str, opt) -> dict:
    state = json.loads((path / "state.json").read_text())
    with torch.no_grad():
        _load_trained(transformer, mode, load_file(str(path / "trained.safetensors")))
    ot = load_file(str(path / "optim.safetensors"))
    per: dict[int, dict[str, Any]] = {}
    for (_, pid, name), v in ((k.split(".", 2), v) for k, v in ot.items() if k.startswith("opt.")):
        per.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": per, "param_groups": opt.state_dict()["param_groups"]})
    torch.set_rng_state(ot["rng.torch"])
    return state


def train_dreambooth(pipe, instance_images: list[Image.Image], cls: str, class_images: list[Image.Image] | None,
                     cfg: DreamBoothConfig, out_dir: str | os.PathLike | None, *, resume: bool = True,
                     stop_after: int | None = None, progress: bool = True) -> DreamBoothResult:
    """DreamBooth-train ``pipe.transformer`` (a ``diffusers.StableDiffusion3Pipeline`` holding the base
    weights: :func:`restore_base` between subjects) in place on one subject; ``class_images`` are
    needed when ``cfg.with_prior``. With ``out_dir`` the run is resumable: a state every
    ``cfg.checkpoint_every`` steps in ``out_dir/resume/`` (one of another :func:`run_key` is discarded;
    ``resume=False`` starts afresh), the finished run in ``weights.safetensors`` + ``dreambooth.json``
    (then the states go); a finished run is loaded into the pipeline and returned at once.
    ``stop_after`` stops after that many steps without saving (a simulated kill). The optimiser is
    torch's AdamW (fused on CUDA). During training the text encoders wait on the CPU (a CUDA run) and
    the transformer recomputes its blocks' activations (``cfg.gradient_checkpointing``): a full run of
    SD3-Medium's 2B transformer then needs ~39 GB (:data:`TRAINING_MEMORY`), within an A100-40GB.
    The transformer is left in eval mode, frozen, in its original dtype, the text encoders back."""
    t0 = time.time()
    if not instance_images or (cfg.with_prior and not class_images):
        raise ValueError("train_dreambooth: needs instance images, and class images when cfg.with_prior")
    key = run_key(pipe, instance_images, cls, class_images, cfg)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and not resume:            # start afresh: an old result must not look finished
        for f in (RECORD_FILE, WEIGHTS_FILE):
            (out / f).unlink(missing_ok=True)
    if out is not None and _finished(out):
        rec = json.loads((out / RECORD_FILE).read_text())
        if rec.get("key") != key:
            raise ValueError(f"{out} holds a finished DreamBooth run of another configuration "
                             f"(key {rec.get('key')} != {key}); use another out_dir or resume=False")
        apply_dreambooth(pipe, out)
        return DreamBoothResult(out, rec["steps"], rec["steps"], True, rec["history"], time.time() - t0,
                                out / WEIGHTS_FILE)
    from diffusers import FlowMatchEulerDiscreteScheduler

    tr, device, orig_dtype = pipe.transformer, pipe._execution_device, pipe.transformer.dtype
    amp = cfg.mixed_precision == "bf16" and torch.device(device).type == "cuda"
    for m in filter(None, (pipe.vae, pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3)):
        m.requires_grad_(False)
    sched = FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config)   # the full training schedule
    emb, pooled = _embed(pipe, cls, cfg, device)
    parked: list = []
    bs, res = cfg.batch_size, cfg.resolution
    inst = [_resize(im, res) for im in instance_images]
    clss = [_resize(im, res) for im in class_images] if cfg.with_prior else []
    rdir = out / "resume" if out is not None else None
    start, history, weights = 0, [], None
    try:
        parked = _park_text_encoders(pipe, device)
        tr.requires_grad_(False)
        if cfg.mode == "lora":
            _add_adapter(tr, cfg.lora_rank, cfg.seed)
        else:
            _drop_adapter(tr)
            if orig_dtype != torch.float32:
                tr.to(torch.float32)  # fp32 master weights (as accelerate's mixed precision keeps them)
            tr.requires_grad_(True)
        wdtype = orig_dtype if cfg.mode == "lora" else torch.float32
        params = [p for p in tr.parameters() if p.requires_grad]
        for p in params:
            p.data = p.data.float()
        # fused on CUDA: one kernel over every tensor, no foreach temporaries the size of the weights
        opt = torch.optim.AdamW(params, lr=cfg.lr, fused=torch.device(device).type == "cuda", **_ADAMW)
        if cfg.gradient_checkpointing and hasattr(tr, "enable_gradient_checkpointing"):
            tr.enable_gradient_checkpointing()
        if rdir is not None:
            st = sorted(p for p in rdir.glob("step_*") if (p / "state.json").exists()) if resume else []
            if st and json.loads(((st := st[-1]) / "state.json").read_text()).get("key") == key:
                state = _load_state(st, tr, cfg.mode, opt)
                start, history = int(state["step"]), list(state["history"])
            elif rdir.exists():
                shutil.rmtree(rdir)        # another configuration's state, or resume=False
        resumed_from = start
        tr.train()
        emb, pooled = emb.to(wdtype), pooled.to(wdtype)
        end = cfg.steps if stop_after is None else min(cfg.steps, max(start, int(stop_after)))
        for step in tqdm(range(start, end), initial=start, total=cfg.steps, desc=f"dreambooth {cls}",
                         disable=not progress, leave=False):
            g = torch.Generator().manual_seed(derive_seed("dreambooth", step, base=cfg.seed))
            pix = [_crop(inst[int(i)], res, g) for i in torch.randint(len(inst), (bs,), generator=g)]
            if cfg.with_prior:
                pix += [_crop(clss[int(i)], res, g) for i in torch.randint(len(clss), (bs,), generator=g)]
            per = _step_losses(pipe, sched, cfg, g, pix, emb, pooled, wdtype, amp)
            parts = {"instance": per[:bs].mean()} | ({"class": per[bs:].mean()} if cfg.with_prior else {})
            loss = parts["instance"] + cfg.prior_weight * parts["class"] if cfg.with_prior else parts["instance"]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
            done = step + 1
            history.append({"step": done, "loss": loss.item()} | {k: v.item() for k, v in parts.items()})
            if rdir is not None and cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
                _save_state(rdir, done, _trained(tr, cfg.mode), opt, {"key": key, "history": history})
        if len(history) >= cfg.steps and out is not None:
            tensors = _trained(tr, cfg.mode)
            weights = atomic_write(out / WEIGHTS_FILE, lambda p: save_file(tensors, str(p)))
            record = {"key": key, "class": cls, "config": asdict(cfg), "steps": cfg.steps, "history": history,
                      "instance_prompt": instance_prompt(cfg.token, cls), "class_prompt": class_prompt(cls),
                      "trained_params": sum(t.numel() for t in tensors.values()),
                      "seconds": round(time.time() - t0, 3)}
            atomic_write_text(out / RECORD_FILE, json.dumps(record, indent=1))
            shutil.rmtree(rdir, ignore_errors=True)
    finally:
        tr.requires_grad_(False).eval()
        if getattr(tr, "is_gradient_checkpointing", False):
            tr.disable_gradient_checkpointing()
        if any(p.dtype != orig_dtype for p in tr.parameters()):
            tr.to(orig_dtype)
        _unpark(parked, device)
    return DreamBoothResult(out, len(history), resumed_from, len(history) >= cfg.steps, history,
                            time.time() - t0, weights)


def generate_class_images(pipe, cls: str, n: int, seed: int, out_dir: str | os.PathLike,
                          **call_kw) -> list[Path]:
    """The ``n`` prior-preservation images of ``cls``: ``out_dir/class_XXXX.png``, made by the *base*
    pipeline (no DreamBooth weights applied) with :func:`class_prompt`, image ``i`` from a CPU
    generator seeded by ``(seed, cls, i)``; written atomically, existing files are kept (resumable).
    ``call_kw`` go to the pipeline call (steps, guidance, height, width). Diffusers' DreamBooth
    example makes 100 per class."""
    paths = [Path(out_dir) / f"class_{i:04d}.png" for i in range(int(n))]
    for i, path in enumerate(paths):
        if not path.exists():
            g = torch.Generator().manual_seed(derive_seed("dreambooth-class", cls, i, base=seed))
            atomic_save_image(path, pipe(prompt=class_prompt(cls), generator=g, **call_kw).images[0])
    return paths
