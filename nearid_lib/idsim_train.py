"""ID-Sim training (paper 001, Sec. 3.2-3.3, App. A and C) on a NearID-schema dataset.

Loss: CLS InfoNCE (anchor, its positive, one hard negative + the batch's other positives and hard
negatives) + lambda * the same InfoNCE with similarity = -Sinkhorn distance between L2-normalised
projected patch-token sets (``nearid_lib.losses.idsim_loss``). AdamW (lr 3e-4, wd 0), micro-batch
8, gradient accumulation 4, ``cfg.idsim.epochs`` epochs capped by ``cfg.idsim.max_steps``
(optimizer steps), bf16 autocast on CUDA.

Training triplets, mixed 1:1:1 (App. A; :func:`build_triplets`):

* ``S1``  real instance pairs: two different views of one identity (different pose and
  background); the negative is the nearest neighbour of the anchor image, in the frozen
  backbone's space, among images of *other* identities of the same class (App. A.1 mining).
* ``S2a`` identity-preserving context edits: the same pair with one or both images replaced by a
  context edit (:func:`context_edit`: the object's pixels kept, the background replaced by a new
  world background, the lighting changed - the mini analogue of the paper's Qwen-Image-Edit
  background/lighting edits); the pair pattern is drawn uniformly from (orig, edit), (edit, orig),
  (edit, edit) as in App. A.2.1; the negative is a mined real image or its context edit.
* ``S2b`` identity-altering edits as hard negatives: a near-identity distractor of the world's
  *training* sources (inpainted into the exact background and mask of the anchor's view) or, for
  part of the rows, an MTG-style part edit (``mtg.csv``: anchor/positive = the two originals,
  negative = a part-edited one).

Instances are drawn with the balanced sampling of App. A.1 (:func:`balanced_quotas`,
:func:`balanced_instances`); the mini world's "datasets" are its object classes. The edit grids
(``grids.csv``) are never used for training: they are the test set of the sensitivity analysis.

Cached mode (CNN backbones, see :mod:`nearid_lib.models.idsim`): the frozen prefix features of
every image are computed once (:class:`PrefixStore`). Augmentations (App. C.4: random resized crop
scale 0.9-1 aspect 1 bicubic; colour jitter 0.2/0.2/0.08 p=0.8; Gaussian blur 7x7 sigma 0.05-0.6
p=0.5, :func:`augment`) are applied to the pixels *before* caching: each image is cached as its
clean version plus ``cfg.idsim.aug_variants`` augmented draws, and every use of an image picks one
of them at random. The paper's "mild generative noise on anchor/positive when the negative is an
edit" has no analogue here (procedural fills leave no generator artefacts) and is not applied.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from PIL import Image, ImageEnhance, ImageFilter

from .seeding import derive_seed, make_rng

__all__ = ["balanced_quotas", "balanced_instances", "context_edit", "augment", "load_key",
           "mine_hard_negatives", "build_triplets", "PrefixStore", "train_idsim", "idsim_spec",
           "train_step_batch", "SUBSETS"]

SUBSETS = ("S1", "S2a", "S2b")
CTX = "ctx:"      # key prefix of a context edit of the image that follows


# ----------------------------------------------------------------------------- App. A.1 balancing
def balanced_quotas(counts: Mapping[str, int], total: int) -> dict[str, int]:
    """Per-dataset instance quotas of ID-Sim App. A.1 steps 1-3 (equal shares; datasets smaller
    than their share give everything and leave; the rest is re-divided until spent; integer
    remainders one each in name order). Delegates to the data package's
    :func:`nearid_lib.data.curation.balanced_allocation` (one implementation in the project).

    Returns {dataset: quota} with quota <= counts[dataset] and sum = min(total, sum(counts))."""
    from .data.curation import balanced_allocation

    if total < 0:
        raise ValueError(f"balanced_quotas: total must be >= 0, got {total}")
    bad = {k: v for k, v in counts.items() if int(v) < 0}
    if bad:
        raise ValueError(f"balanced_quotas: negative instance counts {bad}")
    return {str(k): int(v) for k, v in balanced_allocation(dict(counts), int(total)).items()}


def balanced_instances(instances: pd.DataFrame, total: int, rng: np.random.Generator,
                       group_col: str = "class_name", id_col: str = "id") -> pd.DataFrame:
    """Sample ``total`` unique instances with :func:`balanced_quotas` over ``group_col`` (the
    paper's source datasets; the mini world's classes). Rows keep their original order."""
    for c in (group_col, id_col):
        if c not in instances.columns:
            raise ValueError(f"balanced_instances: column {c!r} missing; have {list(instances.columns)}")
    counts = instances.groupby(group_col)[id_col].nunique().to_dict()
    quotas = balanced_quotas(counts, total)
    keep = []
    for g, q in sorted(quotas.items()):
        ids = sorted(instances.loc[instances[group_col] == g, id_col].unique())
        keep.extend(np.asarray(ids)[rng.permutation(len(ids))[:q]].tolist())
    keep = set(keep)
    return instances[instances[id_col].isin(keep)].copy()


# ----------------------------------------------------------------------------- images
def context_edit(image: Image.Image, mask: np.ndarray, seed: int) -> Image.Image:
    """Identity-preserving context edit (mini analogue of ID-Sim S2a): the object's pixels are
    kept, the background is replaced by a freshly drawn (train-pool) world background, and a global
    lighting change (gain, colour temperature, contrast) is applied to the whole scene."""
    from .data.backgrounds import render_background, sample_background_spec

    rng = make_rng(seed, "context_edit")
    arr = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0          # [H, W, 3]
    H, W = arr.shape[:2]
    m = np.asarray(mask, dtype=bool)
    if m.shape != (H, W):
        raise ValueError(f"context_edit: mask {m.shape} does not match image {(H, W)}")
    bg = render_background(sample_background_spec(rng, held_out=False), H)[:H, :W]
    out = np.where(m[..., None], arr, bg)
    gain = rng.uniform(0.75, 1.2)
    temp = rng.uniform(-0.12, 0.12)                                              # warm (+) / cool (-)
    contrast = rng.uniform(0.8, 1.15)
    out = (out - 0.5) * contrast + 0.5
    out = out * gain * np.array([1 + temp, 1.0, 1 - temp], dtype=np.float32)
    return Image.fromarray((np.clip(out, 0, 1) * 255).round().astype(np.uint8))


def augment(image: Image.Image, seed: int) -> Image.Image:
    """ID-Sim App. C.4 augmentations with an explicit seed: random resized crop (scale 0.9-1.0,
    aspect 1:1, bicubic, back to the input size); colour jitter (brightness 0.2, contrast 0.2,
    saturation 0.08) with p=0.8; Gaussian blur (sigma 0.05-0.6) with p=0.5."""
    rng = make_rng(seed, "augment")
    img = image.convert("RGB")
    W, H = img.size
    s = math.sqrt(rng.uniform(0.9, 1.0))
    cw, ch = max(1, round(W * s)), max(1, round(H * s))
    x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
    img = img.crop((x0, y0, x0 + cw, y0 + ch)).resize((W, H), Image.BICUBIC)
    if rng.random() < 0.8:
        for enh, amt in ((ImageEnhance.Brightness, 0.2), (ImageEnhance.Contrast, 0.2),
                         (ImageEnhance.Color, 0.08)):
            img = enh(img).enhance(float(rng.uniform(1 - amt, 1 + amt)))
    if rng.random() < 0.5:
        img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.05, 0.6))))
    return img


def _mask_of(data, key: str) -> str | None:
    """Mask path of a world image (positives views; distractors share their view's mask)."""
    table = getattr(data, "_idsim_masks", None)
    if table is None:
        table = {}
        for _, r in data.positives.iterrows():
            for k in (1, 2, 3):
                if r[f"img{k}"]:
                    table[r[f"img{k}"]] = r[f"mask{k}"]
        if data.mtg is not None:
            for _, r in data.mtg.iterrows():
                for k in (1, 2):
                    table[r[f"image_{k}_original"]] = r[f"image_{k}_object_mask"]
        data._idsim_masks = table
    return table.get(key)


def load_key(data, key: str, seed: int = 0) -> Image.Image:
    """PIL image for a triplet key: a relative path of the dataset, or ``"ctx:<relpath>"`` (its
    context edit, deterministic in ``seed`` and the path)."""
    if key.startswith(CTX):
        rel = key[len(CTX):]
        mrel = _mask_of(data, rel)
        if mrel is None:
            raise ValueError(f"load_key: no mask known for {rel!r} (context edits need the object mask)")
        return context_edit(data.image(rel), data.mask(mrel), derive_seed("ctx", rel, base=seed))
    return data.image(key)


# ----------------------------------------------------------------------------- prefix cache
class PrefixStore:
    """Frozen prefix features of images (``model.prefix``), computed once per (key, variant).

    Variant 0 is the clean image, variants 1..V are :func:`augment` draws. Stored as float16 on
    the CPU; optional persistence to ``path`` (safetensors, keyed by the model's prefix cache key
    so a different backbone/resolution/split never reads stale features)."""

    def __init__(self, model, data, n_variants: int = 0, seed: int = 0, batch_size: int = 32,
                 path: str | Path | None = None):
        self.model, self.data, self.V, self.seed, self.bs = model, data, int(n_variants), seed, batch_size
        self.feats: dict[tuple[str, int], torch.Tensor] = {}
        self.path = Path(path) if path else None
        self.n_computed = 0
        if self.path and self.path.exists():
            from safetensors.torch import load_file
            from safetensors import safe_open

            with safe_open(str(self.path), "pt") as f:
                meta = f.metadata() or {}
            if (meta.get("cache_key") == model.cache_key() and meta.get("seed") == str(seed)
                    and meta.get("data") == self._data_key()):
                for k, v in load_file(str(self.path)).items():
                    key, _, var = k.rpartition("@")
                    self.feats[(key, int(var))] = v

    def _data_key(self) -> str:
        """Fingerprint of the dataset (its manifest): a rebuilt world never reads stale features."""
        import hashlib
        import json

        man = json.dumps(getattr(self.data, "manifest", {}) or {}, sort_keys=True, default=str)
        return hashlib.blake2b(f"{self.data.root}|{man}".encode(), digest_size=8).hexdigest()

    def _image(self, key: str, variant: int) -> Image.Image:
        img = load_key(self.data, key, self.seed)
        if variant:
            img = augment(img, derive_seed("aug", key, variant, base=self.seed))
        return img

    def ensure(self, keys: Sequence[str], variants: Sequence[int] | None = None,
               progress: Callable[[str], None] | None = None) -> None:
        """Compute missing (key, variant) features (all variants by default)."""
        variants = list(range(self.V + 1)) if variants is None else list(variants)
        todo = [(k, v) for k in dict.fromkeys(keys) for v in variants if (k, v) not in self.feats]
        pre = self.model.preprocess
        for i in range(0, len(todo), self.bs):
            chunk = todo[i:i + self.bs]
            x = torch.stack([pre(self._image(k, v)) for k, v in chunk])
            f = self.model.prefix(x).to("cpu", torch.float16)
            for (k, v), fi in zip(chunk, f):
                self.feats[(k, v)] = fi.clone()
            self.n_computed += len(chunk)
            if progress and (i // self.bs) % 10 == 0:
                progress(f"prefix {min(i + self.bs, len(todo))}/{len(todo)}")

    def get(self, keys: Sequence[str], variants: Sequence[int] | None = None) -> torch.Tensor:
        """Stacked features [B, ...] (float32) of keys (variant 0 unless given)."""
        variants = [0] * len(keys) if variants is None else list(variants)
        for v in sorted(set(variants)):
            self.ensure([k for k, vv in zip(keys, variants) if vv == v and (k, v) not in self.feats], [v])
        return torch.stack([self.feats[(k, v)] for k, v in zip(keys, variants)]).float()

    def save(self) -> None:
        if not self.path:
            return
        from safetensors.torch import save_file

        from .io_utils import atomic_write

        tensors = {f"{k}@{v}": t.contiguous() for (k, v), t in self.feats.items()}
        meta = {"cache_key": self.model.cache_key(), "seed": str(self.seed), "data": self._data_key()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda p: save_file(tensors, str(p), metadata=meta))


@torch.no_grad()
def frozen_embeddings(model, store: PrefixStore, keys: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """L2-normalised frozen-backbone global embeddings [N, D] (LoRA disabled, no heads)."""
    out = []
    with model.adapters_disabled():
        for i in range(0, len(keys), batch_size):
            cls, _ = model.raw_from_prefix(store.get(keys[i:i + batch_size]))
            out.append(F.normalize(cls.float(), dim=-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, 1)


# ----------------------------------------------------------------------------- triplets
def mine_hard_negatives(emb: torch.Tensor | np.ndarray, identity: Sequence[str], group: Sequence[str]
                        ) -> np.ndarray:
    """For every image i, the index of its nearest neighbour (cosine, in the given L2-normalised
    embedding) among images of a *different identity* of the *same group* (class); -1 if none.
    Ties go to the lowest index."""
    e = torch.as_tensor(np.asarray(emb), dtype=torch.float64)
    ids = np.asarray(identity)
    grp = np.asarray(group)
    sim = (e @ e.T).numpy()                                              # [N, N]
    allowed = (ids[:, None] != ids[None, :]) & (grp[:, None] == grp[None, :])
    sim = np.where(allowed, sim, -np.inf)
    nn_idx = np.argmax(sim, axis=1)
    nn_idx[~allowed.any(axis=1)] = -1
    return nn_idx


def _views(data, ids: set[str]) -> pd.DataFrame:
    rows = []
    cls = dict(zip(data.identities["id"], data.identities["class_name"]))
    for i, r in data.positives.iterrows():
        if r["id"] not in ids:
            continue
        for k in (1, 2, 3):
            if r[f"img{k}"]:
                rows.append({"id": r["id"], "class_name": cls[r["id"]], "view": k, "img": r[f"img{k}"],
                             "row": i})
    return pd.DataFrame(rows)


def build_triplets(data, instances: pd.DataFrame, n_triplets: int, rng: np.random.Generator,
                   embed: Callable[[list[str]], torch.Tensor], mix: Sequence[float] = (1, 1, 1),
                   split: str = "train", mtg_share: float = 0.3) -> pd.DataFrame:
    """The ID-Sim training triplets (see the module docstring) for the identities in
    ``instances`` (columns id, class_name). ``embed(keys) -> [N, D]`` gives L2-normalised frozen
    embeddings for hard-negative mining. Returns a DataFrame with columns subset, anchor, positive,
    negative, neg_kind (mined_real | mined_ctx | distractor:<source> | mtg_part), anchor_id,
    neg_id; rows shuffled."""
    ids = set(instances["id"])
    views = _views(data, ids)
    if views.empty:
        raise ValueError(f"build_triplets: no views for the {len(ids)} identities given")
    keys = views["img"].tolist()
    emb = embed(keys)
    nn_idx = mine_hard_negatives(emb, views["id"].tolist(), views["class_name"].tolist())
    by_id = {i: g.index.to_numpy() for i, g in views.groupby("id")}
    id_list = sorted(by_id)
    w = np.asarray(mix, dtype=float)
    counts = np.floor(w / w.sum() * n_triplets).astype(int)
    counts[: n_triplets - counts.sum()] += 1
    sources = list(getattr(data, "train_sources", []) or [])
    mtg = data.mtg[data.mtg.split == split] if data.mtg is not None else None
    rows = []

    def pair() -> tuple[int, int]:
        iid = id_list[int(rng.integers(len(id_list)))]
        a, p = rng.choice(by_id[iid], size=2, replace=False)
        return int(a), int(p)

    def mined(a: int) -> tuple[str, str]:
        n = nn_idx[a]
        if n < 0:       # a class with one identity: any other identity
            others = views.index[views["id"] != views.at[a, "id"]].to_numpy()
            n = int(rng.choice(others))
        return views.at[n, "img"], views.at[n, "id"]

    for subset, c in zip(SUBSETS, counts):
        for _ in range(int(c)):
            if subset == "S2b" and mtg is not None and len(mtg) and rng.random() < mtg_share:
                r = mtg.iloc[int(rng.integers(len(mtg)))]
                k = int(rng.integers(1, 3))
                rows.append({"subset": subset, "anchor": r[f"image_{3 - k}_original"],
                             "positive": r[f"image_{k}_original"], "negative": r[f"image_{k}_inpainted"],
                             "neg_kind": "mtg_part", "anchor_id": r["pair_id"], "neg_id": r["pair_id"] + "_edit"})
                continue
            a, p = pair()
            ak, pk, aid = views.at[a, "img"], views.at[p, "img"], views.at[a, "id"]
            if subset == "S1":
                nk, nid = mined(a)
                kind = "mined_real"
            elif subset == "S2a":
                pattern = int(rng.integers(3))   # (orig, edit), (edit, orig), (edit, edit)
                ak2 = ak if pattern == 0 else CTX + ak
                pk2 = CTX + pk if pattern in (0, 2) else pk
                if pattern == 1 and ak2 == CTX + pk2:   # never an image against its own edit
                    pk2 = pk
                ak, pk = ak2, pk2
                nk, nid = mined(a)
                kind = "mined_real"
                if rng.random() < 0.5:
                    nk, kind = CTX + nk, "mined_ctx"
            else:
                if not sources:
                    raise ValueError("build_triplets: S2b needs train distractor sources (sources.json)")
                src = sources[int(rng.integers(len(sources)))]
                nk = data.distractors[src].at[int(views.at[a, "row"]), f"nimg{int(views.at[a, 'view'])}"]
                nid, kind = aid + "_" + src, f"distractor:{src}"
            rows.append({"subset": subset, "anchor": ak, "positive": pk, "negative": nk,
                         "neg_kind": kind, "anchor_id": aid, "neg_id": nid})
    df = pd.DataFrame(rows)
    return df.iloc[rng.permutation(len(df))].reset_index(drop=True)


# ----------------------------------------------------------------------------- training
def idsim_spec(cfg):
    """The :class:`~nearid_lib.models.idsim.IDSimSpec` of a profile's ``idsim`` section."""
    from .models.idsim import IDSimSpec

    c = cfg.idsim
    return IDSimSpec(backbone=c.backbone, tiny=bool(c.tiny), image_size=c.image_size,
                     lora_rank=c.lora_rank, lora_alpha=c.lora_alpha, lora_dropout=c.lora_dropout,
                     head_hidden=c.head_hidden, head_out=c.head_out, adapt_stages=c.adapt_stages)


def train_step_batch(model, feats: torch.Tensor, B: int, cfg) -> tuple[torch.Tensor, dict]:
    """Loss of one micro-batch: ``feats`` [3B, ...] = anchors, positives, negatives (prefix
    features). Returns (loss, parts)."""
    from .losses import idsim_loss

    c = cfg.idsim
    use_bf16 = c.mixed_precision == "bf16" and feats.is_cuda
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
        out = model.from_prefix(feats)
    cls, tok = out.pooled.float(), out.tokens.float()
    return idsim_loss(cls[:B], cls[B:2 * B], cls[2 * B:], tok[:B], tok[B:2 * B], tok[2 * B:],
                      lam=c.lam, temperature=c.temperature, blur=c.sinkhorn_blur)


def train_idsim(cfg, data, model=None, store_path: str | Path | None = None,
                log: Callable[[str], None] = print, device: str = "cpu") -> dict[str, Any]:
    """Train ID-Sim on the train split of ``data`` with profile ``cfg``.

    Returns dict: ``model``, ``history`` (DataFrame: step, loss, cls, patch, seconds),
    ``triplets`` (DataFrame), ``instances`` (DataFrame), ``store`` (PrefixStore),
    ``timings`` (seconds of caching / training), ``n_steps``."""
    from .models.idsim import build_idsim

    c = cfg.idsim
    seed = int(cfg.seed)
    torch.manual_seed(derive_seed("idsim-init", base=seed))
    model = model or build_idsim(idsim_spec(cfg), device=device)
    t0 = time.time()
    ids = data.identities[data.identities.split == "train"]
    inst = balanced_instances(ids, c.n_instances, make_rng(seed, "idsim-balance"))
    store = PrefixStore(model, data, n_variants=c.aug_variants if c.augment else 0, seed=seed,
                        batch_size=c.cache_batch_size, path=store_path)

    def embed(keys):
        store.ensure(keys, [0])
        return frozen_embeddings(model, store, keys)

    trip = build_triplets(data, inst, c.n_triplets, make_rng(seed, "idsim-triplets"), embed,
                          mix=c.mix)
    all_keys = list(dict.fromkeys(trip[["anchor", "positive", "negative"]].to_numpy().ravel().tolist()))
    store.ensure(all_keys, progress=log)
    store.save()
    t_cache = time.time() - t0
    log(f"idsim: {len(inst)} instances, {len(trip)} triplets, {len(all_keys)} images "
        f"x {store.V + 1} variants cached in {t_cache:.1f}s ({store.n_computed} computed)")

    params = model.trainable_parameters()
    opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)
    B, accum = int(c.batch_size), max(1, int(c.grad_accum))
    n_micro_epoch = len(trip) // B
    if n_micro_epoch == 0:
        raise ValueError(f"train_idsim: {len(trip)} triplets < batch size {B}")
    total_steps = (n_micro_epoch * int(c.epochs)) // accum
    if c.max_steps is not None:
        total_steps = min(total_steps, int(c.max_steps))
    rng = make_rng(seed, "idsim-train")
    hist, step, micro = [], 0, 0
    model.train()
    t1 = time.time()
    opt.zero_grad(set_to_none=True)
    while step < total_steps:
        order = rng.permutation(len(trip))
        for j in range(n_micro_epoch):
            rows = trip.iloc[order[j * B:(j + 1) * B]]
            keys = rows["anchor"].tolist() + rows["positive"].tolist() + rows["negative"].tolist()
            var = rng.integers(0, store.V + 1, size=len(keys)).tolist()
            feats = store.get(keys, var).to(model.device)          # [3B, C, h, w]
            loss, parts = train_step_batch(model, feats, B, cfg)
            (loss / accum).backward()
            micro += 1
            if micro % accum == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                hist.append({"step": step, "loss": float(loss.detach()), "cls": float(parts["cls"]),
                             "patch": float(parts["patch"]), "seconds": time.time() - t1})
                if step % max(1, total_steps // 10) == 0 or step == total_steps:
                    log(f"idsim step {step}/{total_steps} loss {hist[-1]['loss']:.3f} "
                        f"(cls {hist[-1]['cls']:.3f}, patch {hist[-1]['patch']:.3f})")
                if step >= total_steps:
                    break
    model.eval()
    return {"model": model, "history": pd.DataFrame(hist), "triplets": trip, "instances": inst,
            "store": store, "timings": {"cache_s": t_cache, "train_s": time.time() - t1},
            "n_steps": step}
