"""The local mirror of the paper path: what is fetched of each repository, the record of every
download, and the checks that read those records.

**What is fetched** (:func:`fetch_policy`): per repository only the files the pipeline loads. Every
model repository skips the weight formats no loader here reads (TensorFlow, Flax, ONNX, Core ML,
OpenVINO, Rust: :data:`SKIP_FORMATS`); the repositories that ship the same weights twice name what
is loaded (:data:`POLICIES`): the FLUX.1 repositories and SDXL hold a single-file checkpoint beside
their diffusers folders (only the diffusers folders are loaded), IP-Adapter holds a dozen adapters
(two are loaded), transformers models whose ``model.safetensors`` is loaded also carry
``pytorch_model.bin``. A repository the table does not name (one added to ``hub.PAPER_REPOS``
later) gets the default: everything but :data:`SKIP_FORMATS`.

**The download record** (:func:`write_record`, ``<root>/.nearid-downloads/<org>/<name>.json``): the
commit read, the patterns, and every file with its size, as the hub listed them before the download
(``snapshot_download(dry_run=True)``); :func:`check_record` compares a folder with it by ``stat``
alone (missing files, other sizes, interrupted transfers), which is what the preflight does.

**Gated repositories** (:data:`GATED`): the licence is accepted on the repository's hub page, then
``hf auth login`` (or ``export HF_TOKEN=...``) on the machine that downloads.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .io_utils import write_json

__all__ = ["SKIP_FORMATS", "Policy", "POLICIES", "GATED", "KNOWN_SIZES", "RECORD_DIR", "fetch_policy",
           "record_path", "read_record", "write_record", "scan_files", "check_record", "incomplete_files",
           "login_hint", "git_head", "git_checkout", "weight_files"]

RECORD_DIR = ".nearid-downloads"
SKIP_FORMATS = ("*.h5", "*.msgpack", "*.ot", "*.onnx", "*.onnx_data", "*.tflite", "onnx/*", "coreml/*", "openvino/*")
# Every gated repository the project reads, the one list the download hints, the preflight and the
# docs use (tests/test_hub.py checks the docs against it): the licence is accepted on the hub page
# first (DINOv3: Meta's; SD3 and FLUX.1 [dev]: their own). FLUX.1-Canny-dev is read only when the
# distractor sources are regenerated (generate.specs.DEFAULT_HUB_IDS), so it is not in hub.PAPER_REPOS.
GATED = frozenset({"facebook/dinov3-vitl16-pretrain-lvd1689m", "facebook/dinov3-vitb16-pretrain-lvd1689m",
                   "stabilityai/stable-diffusion-3-medium-diffusers", "black-forest-labs/FLUX.1-Kontext-dev",
                   "black-forest-labs/FLUX.1-Fill-dev", "black-forest-labs/FLUX.1-Canny-dev"})
# Sizes known from a source (not read from the hub here: no hub access on this machine); every other
# repository's size is in its download record, or printed by ``python -m nearid_lib.hub download --dry-run``.
# The Qwen3-VL judges' sizes are their bf16 weights, 2 bytes per parameter of the model card (the
# counts of judge.plan.JUDGE_MODELS). All three get the default policy, like every repository not in POLICIES.
KNOWN_SIZES = {"Aleksandar/NearID-PowerPaint": "2.45 GB (5 shards; the authors' guide)",
               "Qwen/Qwen3-VL-4B-Instruct": "about 8.9 GB of bf16 weights (4.44 B parameters, its model card)",
               "Qwen/Qwen3-VL-8B-Instruct": "about 17.5 GB of bf16 weights (8.77 B parameters, its model card)",
               "Qwen/Qwen3-VL-30B-A3B-Instruct": "about 62 GB of bf16 weights (31.07 B parameters, its model card)"}


@dataclass(frozen=True)
class Policy:
    """Which files of one repository are fetched: ``allow`` (None: all) minus ``ignore``; ``why``."""

    allow: tuple[str, ...] | None
    ignore: tuple[str, ...]
    why: str


def _diffusers(*components: str, ignore: tuple[str, ...] = ()) -> tuple[str, ...]:
    return ("model_index.json", *(f"{c}/*" for c in components)) + ignore


_FLUX = ("scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "transformer", "vae")
_SAFETENSORS = "model.safetensors is what from_pretrained loads; the PyTorch pickle beside it is a second copy"
POLICIES: dict[str, Policy] = {
    "black-forest-labs/FLUX.1-Kontext-dev": Policy(_diffusers(*_FLUX), SKIP_FORMATS,
                                                   "the diffusers folders only (FluxKontextPipeline); not the "
                                                   "single-file flux1-kontext-dev.safetensors / ae.safetensors copy"),
    "black-forest-labs/FLUX.1-Fill-dev": Policy(_diffusers(*_FLUX), SKIP_FORMATS,
                                                "the diffusers folders only (FluxFillPipeline); not the single-file "
                                                "flux1-fill-dev.safetensors / ae.safetensors copy"),
    "stabilityai/stable-diffusion-xl-base-1.0": Policy(
        ("model_index.json", "scheduler/*", "tokenizer/*", "tokenizer_2/*",
         *(f"{c}/config.json" for c in ("text_encoder", "text_encoder_2", "unet", "vae")),
         "text_encoder/model.safetensors", "text_encoder_2/model.safetensors",
         "unet/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors"),
        SKIP_FORMATS, "the diffusers components in float32 safetensors (StableDiffusionXLPipeline without a "
                      "variant); not sd_xl_base_1.0*.safetensors, the fp16 variants or the .bin copies"),
    "stabilityai/stable-diffusion-3-medium-diffusers": Policy(
        _diffusers("scheduler", "text_encoder", "text_encoder_2", "text_encoder_3", "tokenizer", "tokenizer_2",
                   "tokenizer_3", "transformer", "vae"), (*SKIP_FORMATS, "*.fp16.*"),
        "the diffusers components (StableDiffusion3Pipeline without a variant)"),
    "h94/IP-Adapter": Policy(
        ("sdxl_models/ip-adapter_sdxl.safetensors", "sdxl_models/ip-adapter-plus_sdxl_vit-h.safetensors",
         "sdxl_models/image_encoder/config.json", "sdxl_models/image_encoder/model.safetensors",
         "models/image_encoder/config.json", "models/image_encoder/model.safetensors"), SKIP_FORMATS,
        "the two SDXL adapters FPR uses (ViT-G, Plus ViT-H) and their image encoders"),
    **{r: Policy(None, (*SKIP_FORMATS, "*.bin"), _SAFETENSORS)
       for r in ("openai/clip-vit-large-patch14", "openai/clip-vit-base-patch32", "facebook/dinov2-large",
                 "facebook/dinov2-base", "facebook/sam-vit-huge")},
}


def fetch_policy(repo_id: str, repo_type: str = "model") -> Policy:
    """The files of ``repo_id`` the paper path fetches (module docstring); a model repository not
    in :data:`POLICIES` gets everything but :data:`SKIP_FORMATS`, a dataset repository everything."""
    if repo_id in POLICIES:
        return POLICIES[repo_id]
    if repo_type == "dataset":
        return Policy(None, (), "every file (the dataset as published)")
    return Policy(None, SKIP_FORMATS, "every file but weight formats no loader here reads")


def login_hint(repo_id: str) -> str:
    """How to get access to a gated repository."""
    return (f"{repo_id} is gated: accept its licence on https://huggingface.co/{repo_id} with your account, "
            f"then run `hf auth login` (or export HF_TOKEN=<a read token>) and download again")


# --------------------------------------------------------------------------- records
def record_path(root: str | os.PathLike, repo_id: str) -> Path:
    """Where the download record of ``repo_id`` under ``root`` (a mirror or the downloads folder) is."""
    return Path(root) / RECORD_DIR / f"{repo_id}.json"


def read_record(root: str | os.PathLike, repo_id: str) -> dict | None:
    """The download record of ``repo_id`` (None when it has none or it is not JSON)."""
    p = record_path(root, repo_id)
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_record(root: str | os.PathLike, repo_id: str, repo_type: str, revision: str | None,
                 files: Mapping[str, int | None], policy: Policy | None = None, **extra: Any) -> Path:
    """Record one download: the commit, the patterns and every file with its size."""
    rec = {"repo": repo_id, "type": repo_type, "revision": revision,
           "allow": list(policy.allow) if policy and policy.allow else None,
           "ignore": list(policy.ignore) if policy else None,
           "files": {k: (int(v) if v is not None else None) for k, v in sorted(files.items())},
           "bytes": int(sum(v or 0 for v in files.values())),
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **extra}
    return write_json(rec, record_path(root, repo_id))


def scan_files(folder: str | os.PathLike) -> dict[str, int]:
    """``{relative path: size}`` of a downloaded folder (hf's ``.cache`` and ``.git`` left out)."""
    folder = Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if rel.parts[0] in (".cache", ".git") or not p.is_file():
            continue
        out[rel.as_posix()] = p.stat().st_size
    return out


def incomplete_files(folder: str | os.PathLike) -> list[str]:
    """Transfers ``hf download`` / ``snapshot_download`` left unfinished in a folder."""
    meta = Path(folder) / ".cache" / "huggingface" / "download"
    return sorted(p.relative_to(meta).as_posix() for p in meta.rglob("*.incomplete")) if meta.is_dir() else []


def check_record(folder: str | os.PathLike, record: Mapping[str, Any]) -> list[str]:
    """Problems of ``folder`` against its download record, by ``stat`` alone: files missing or of
    another size than recorded (first five named), interrupted transfers."""
    folder = Path(folder)
    missing, resized = [], []
    for rel, size in (record.get("files") or {}).items():
        p = folder / rel
        if not p.is_file():
            missing.append(rel)
        elif size is not None and p.stat().st_size != size:
            resized.append(f"{rel} ({p.stat().st_size} bytes, recorded {size})")
    out = []
    if missing:
        out.append(f"{len(missing)} recorded file(s) missing: {', '.join(missing[:5])}")
    if resized:
        out.append(f"{len(resized)} file(s) of another size than recorded (truncated?): {', '.join(resized[:5])}")
    left = incomplete_files(folder)
    if left:
        out.append(f"{len(left)} interrupted transfer(s): {', '.join(left[:5])}")
    return out


def weight_files(folder: str | os.PathLike) -> list[str]:
    """The weight files of a model folder (safetensors, PyTorch pickles, open_clip / timm checkpoints)."""
    exts = (".safetensors", ".bin", ".pth", ".pt", ".ckpt")
    return [k for k in scan_files(folder) if k.endswith(exts)]


# --------------------------------------------------------------------------- git
Runner = Callable[..., Any]


def git_head(where: str | os.PathLike, run: Runner = subprocess.run) -> str | None:
    """The commit checked out in ``where`` (None: not a git clone -- a folder inside another clone
    is not one -- or nothing checked out)."""
    if not (Path(where) / ".git").exists():
        return None
    try:
        r = run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return r.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def git_checkout(url: str, where: str | os.PathLike, commit: str | None, run: Runner = subprocess.run) -> str:
    """Put ``url`` at ``commit`` in ``where`` (the default branch's head when ``commit`` is None):
    a new folder is initialised, an existing clone at another commit is moved to it (``git fetch
    --depth 1 <url> <commit>``, then a detached checkout). Returns what happened."""
    where = Path(where)
    if not (where / ".git").is_dir():
        where.mkdir(parents=True, exist_ok=True)
        run(["git", "init", "-q", str(where)], check=True)
        was = None
    else:
        was = git_head(where, run)
        if commit is not None and was == commit:
            return f"kept at {commit[:12]}"
    run(["git", "-C", str(where), "fetch", "-q", "--depth", "1", url, commit or "HEAD"], check=True)
    run(["git", "-C", str(where), "checkout", "-q", "--detach", "FETCH_HEAD"], check=True)
    now = git_head(where, run)
    if commit is not None and now != commit:
        raise RuntimeError(f"git {url}: checked out {now}, wanted {commit}")
    return f"updated {was[:12]} -> {now[:12]}" if was and now and was != now else f"checked out {(now or '?')[:12]}"
