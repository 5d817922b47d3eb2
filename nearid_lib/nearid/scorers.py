"""The bench encoders of NearID-bench: every encoder is scored through the same three calls, whether it
embeds images (frozen backbones, the NearID head: :class:`EmbeddingBenchEncoder`, over an
:class:`~nearid_lib.nearid.embedder.Embedder` and its feature caches) or judges pairs (the VLM judge:
:class:`PairBenchEncoder`, which scores exactly the pairs the protocol needs and reports coverage)::

    benc.nearid(data, split, variant) -> evaluate.nearid_bench-style dict (per_source, pooled, table)
    benc.mtg(data, split, variant)    -> (metrics.mtg_metrics dict or None, per-pair scores dict)
    benc.pair_scores(pairs, variant)  -> [M] similarities (NaN = not scored)

:func:`load_bench_encoders` builds the encoders of a profile (``cfg.eval.encoders`` and the judge).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .. import hub
from ..data.groups import group_items
from ..features import FeatureStore, dataset_refs, dataset_scope, embed
from ..models import RANDOM_INIT, NearIDEncoder, load_backbone, load_encoder, resolve_name, split_weights
from ..models.registry import RELEASE_REPO
from ..paths import cache_dir, checkpoint_dir
from .embedder import Embedder
from .evaluate import embed_split, nearid_bench
from ..judge.plan import JUDGE_MODELS, judge_gate
from .judges import judge_answers_dir, judge_encoder, judge_encoders, judge_models, judge_name
from .pair_encoder import CosinePairScorer, PairBenchEncoder
from .pairs import mtg_from_scores, mtg_pairs
from .release import RELEASE_FLOAT, RELEASE_INT8, release_why, same_tower

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["CosinePairScorer", "PairBenchEncoder", "EmbeddingBenchEncoder", "StoreEmbedder", "StoreBenchEncoder",
           "BenchEncoders", "load_bench_encoders", "release_encoders", "judge_encoder", "judge_answers_dir"]


class EmbeddingBenchEncoder:
    """A bench encoder over :class:`~nearid_lib.nearid.embedder.Embedder` (cached backbone tokens; the
    frozen pooled output, or a MAP head over the tokens)."""

    kind = "embedding"

    def __init__(self, embedder, name: str, label: str | None = None):
        self.embedder, self.name, self.label = embedder, name, label or name
        self.coverage: dict[str, dict] = {}
        self._grid: dict[str, dict[str, np.ndarray]] = {}

    def nearid(self, data: NearIDData, split: str = "test", variant: str = "full", sources: Sequence[str] | None = None):
        se = embed_split(self.embedder, data, split, variant, sources, with_mtg=False)
        return nearid_bench(se, data.train_sources, per_identity=True)

    def mtg(self, data: NearIDData, split: str = "test", variant: str = "full"):
        m, sets = mtg_pairs(data, split)
        if not len(m):
            return None, {}
        return mtg_from_scores(m, {k: self.pair_scores(data, v, variant) for k, v in sets.items()})

    def embed(self, data: NearIDData, rels: Sequence[str], masks: Sequence[str], variant: str = "full") -> np.ndarray:
        """L2-normalised embeddings [n, E]; dataset images through the Embedder's caches, anything
        else (grid images) through one extra cache over exactly those images."""
        owners = self.embedder._owners()
        known = [r in owners for r in rels]
        out = None
        if any(known):
            idx = [i for i, k in enumerate(known) if k]
            e = self.embedder.embed([rels[i] for i in idx], variant).numpy()
            out = np.full((len(rels), e.shape[1]), np.nan)
            out[idx] = e
        rest = [i for i, k in enumerate(known) if not k]
        if rest:
            e = self._extra_embed([rels[i] for i in rest], [masks[i] for i in rest], variant)
            if out is None:
                out = np.full((len(rels), e.shape[1]), np.nan)
            out[rest] = e
        return out if out is not None else np.zeros((0, 1))

    def _extra_embed(self, rels, masks, variant):
        key = variant
        memo = self._grid.setdefault(key, {})
        todo = [i for i, r in enumerate(rels) if r not in memo]
        if todo:
            uniq = list(dict.fromkeys(rels[i] for i in todo))
            mk = {rels[i]: masks[i] for i in todo}
            emb, um = self.embedder, [mk[u] for u in uniq]
            if emb.use_cache and emb.head is not None and emb._cached_tokens:
                emb.pooled(uniq, variant, masks=um)     # one cache over exactly these images, then read
            e = emb.embed(uniq, variant, masks=um, head_batch=256)
            for u, v in zip(uniq, e.numpy()):
                memo[u] = v
        return np.stack([memo[r] for r in rels])

    def pair_scores(self, data: NearIDData, pairs: Sequence[tuple], variant: str = "full", tag: str = "pairs") -> np.ndarray:
        if not pairs:
            return np.zeros(0)
        a = self.embed(data, [p[0] for p in pairs], [p[1] for p in pairs], variant)
        b = self.embed(data, [p[2] for p in pairs], [p[3] for p in pairs], variant)
        return (a * b).sum(1)

    def grid_scores(self, data: NearIDData, gp: pd.DataFrame, variant: str = "full") -> np.ndarray:
        return self.pair_scores(data, list(zip(gp["ref"], gp["ref_mask"], gp["img"], gp["mask"])), variant)

    def coverage_summary(self) -> dict[str, float]:
        return {}


# --------------------------------------------------------------------------- encoders of a profile
# --------------------------------------------------------------------------- any encoder through a feature store
class StoreEmbedder(Embedder):
    """An :class:`~nearid_lib.nearid.embedder.Embedder` whose embeddings come from a
    :class:`~nearid_lib.models.UserEncoder` run on the images themselves (a callable has no tokens to cache), through
    the library's one feature path (:func:`nearid_lib.features.embed`): rows keyed by relpath in a
    :class:`~nearid_lib.features.FeatureStore` under ``folder`` (None: memory), scoped to the
    dataset's fingerprint, written in chunks of ``chunk_images`` as soon as each fills: a killed
    run loses at most one chunk and the next run embeds only the rest."""

    def __init__(self, encoder, data: NearIDData, folder: Path | None = None,
                 batch_size: int = 32, progress: bool = True, chunk_images: int = 256):
        super().__init__(encoder, data, use_cache=False, store_tokens=False, batch_size=batch_size,
                         progress=progress)
        self.store = FeatureStore(folder, chunk_items=chunk_images)
        self.scope = dataset_scope(data)

    def ensure(self, rels: Sequence[str], masks: Sequence[str], variant: str = "full") -> np.ndarray:
        """Embeddings ``[n, D]`` (L2-normalised) of ``rels`` (with their ``masks`` for a masked
        variant), embedding the ones not in the store yet."""
        return embed(self.encoder, dataset_refs(self.data, list(rels), list(masks)), variant, self.store,
                     scope=self.scope, batch_size=self.batch_size, progress=self.progress)

    def prefetch(self, groups, variants: Sequence[str] = ("full",),
                 extra: tuple[Sequence[str], Sequence[str]] | None = None) -> None:
        """Embed every image of ``groups`` for each variant in one pass per variant (one progress
        bar), with the ``extra`` images (the edit grids) in the full-image pass."""
        groups = list(groups)
        for v in variants:
            rels, masks = [], []
            for g in groups:
                r, m = group_items(self.data, g)
                rels += r
                masks += m
            if v == "full" and extra is not None:
                rels += list(extra[0])
                masks += list(extra[1])
            self.ensure(rels, masks, v)

    def embed(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        own = self._owners()
        missing = [r for r in relpaths if r not in own]
        if missing:
            raise KeyError(f"{missing[0]!r} is not an image of the dataset at {self.data.root}")
        return torch.from_numpy(self.ensure(relpaths, [own[r][1] for r in relpaths], variant).astype(np.float32))


class StoreBenchEncoder(EmbeddingBenchEncoder):
    """The NearID-bench encoder of a callable: every image (dataset or grid) through its StoreEmbedder."""

    def embed(self, data: NearIDData, rels: Sequence[str], masks: Sequence[str], variant: str = "full") -> np.ndarray:
        return self.embedder.ensure(list(rels), list(masks), variant).astype(np.float64)


def _frozen_label(name: str, tiny: bool, random_init: bool = False) -> str:
    if random_init:       # no "frozen" in it: the figures give the chance reference its own grey
        base = {"efficientnet-lite0": "EfficientNet-Lite0 GAP"}.get(name, name)
        return f"{base} at random init (chance reference)"
    base = {"efficientnet-lite0": "EfficientNet-Lite0 GAP (frozen)"}.get(name, f"{name} (frozen)")
    return ("tiny random-init " + base) if tiny else base


def release_encoders(cfg: Profile, data: NearIDData, backbone=None) -> tuple[list, str | None]:
    """The authors' released model (:mod:`.release`) as bench encoders: ``nearid-release`` through
    the float32 forward on the images (the guide's precision), and, when ``cfg.train.token_store`` is
    a quantised store and ``backbone`` (the profile's frozen backbone, whose store our heads are
    scored from) is given, ``nearid-release-int8``: the released head on that store. Returns
    ``(encoders, why)``, ``why`` saying why there are none."""
    why = release_why()
    if why:
        return [], why
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    enc, _ = load_encoder("nearid", checkpoint=RELEASE_REPO, device=dev, dtype="float32")
    enc.eval()
    tower = enc.backbone.weights or enc.backbone.name
    emb = StoreEmbedder(enc, data, folder=cache_dir(cfg.name) / "release_float", batch_size=cfg.backbone.batch_size,
                        progress=False)
    out = [StoreBenchEncoder(emb, RELEASE_FLOAT, f"NearID released weights ({RELEASE_REPO}: tower {tower} + head), "
                                                 f"float32 forward on the images (the guide's precision)")]
    if backbone is not None and cfg.train.token_store != "cache" and getattr(backbone, "n_tokens", 0):
        twin = NearIDEncoder(backbone, enc.head.to(backbone.device), name="nearid")
        twin.eval()
        same = same_tower(enc.backbone.model, backbone.model) if hasattr(backbone, "model") else False
        label = (f"NearID released head on the {cfg.train.token_store} token store of the profile's {backbone.name} "
                 f"({'the same tower weights' if same else 'NOT the released tower'}), as our heads are scored")
        bench = EmbeddingBenchEncoder(Embedder(twin, data, profile=cfg, progress=False), RELEASE_INT8, label)
        bench.same_tower = same
        out.append(bench)
    return out, None


class BenchEncoders(list):
    """The bench encoders of a profile (a list), with ``gated``: ``{encoder name: reason}`` for the
    encoders the profile asks for that cannot be scored now (a judge behind its gate, the released
    weights absent), whose rows the tables show empty with that reason (:mod:`.unscored`)."""

    def __init__(self, items=(), gated: Mapping[str, str] | None = None):
        super().__init__(items)
        self.gated: dict[str, str] = dict(gated or {})


def load_bench_encoders(cfg: Profile, data: NearIDData, checkpoint=None, judge=None,
                        checkpoints: Sequence[tuple[int, str | Path]] | None = None) -> BenchEncoders:
    """The bench encoders of ``cfg.eval.encoders`` (+ the VLM judges of ``cfg.eval.vlm_judge`` and
    ``cfg.eval.vlm_scales``, :func:`~nearid_lib.nearid.judges.judge_encoders`), as a
    :class:`BenchEncoders` whose ``gated`` says which asked-for rows cannot be scored and why.

    ``nearid`` loads the trained head of every ``(seed, folder)`` in ``checkpoints`` (one bench
    encoder per seed, ``.seed`` set; default: the single ``checkpoint``, else ``checkpoint_dir(profile)
    / "nearid"``); the heads share one backbone object, and a frozen encoder with the same backbone
    reuses it too, so all read the same feature caches. ``nearid-release`` is the authors' released
    model (their tower and head, :func:`release_encoders`). ``judge`` overrides the judge object (tests)."""
    out = BenchEncoders()
    heads = []
    if "nearid" in cfg.eval.encoders:
        ckpts = list(checkpoints) if checkpoints else [(cfg.seed, checkpoint or (checkpoint_dir(cfg.name) / "nearid"))]
        for seed, ckpt in ckpts:
            if not ckpt or not Path(ckpt).exists():
                raise FileNotFoundError(f"NearID checkpoint {ckpt} not found: run notebook 03_train_nearid "
                                        f"(profile {cfg.name!r}) first")
            enc, _ = load_encoder("nearid", checkpoint=str(ckpt))
            if heads:                            # one backbone object (and cache index) for all seeds
                enc = NearIDEncoder(heads[0][1].backbone, enc.head)
            enc.eval()
            heads.append((seed, enc))
    nearid_enc = heads[0][1] if heads else None
    for name in cfg.eval.encoders:
        if name == RELEASE_FLOAT:
            rel, why = release_encoders(cfg, data, nearid_enc.backbone if nearid_enc is not None else None)
            out.extend(rel)
            if why:
                print(f"{RELEASE_FLOAT}: row skipped, {why}")
                out.gated[RELEASE_FLOAT] = why
            continue
        if name == "nearid":
            bb = nearid_enc.backbone
            label = (f"NearID MAP head (loss {cfg.train.loss}) on frozen "
                     f"{'tiny random-init ' if bb.tiny else ''}{bb.name} tokens"
                     + (f" ({getattr(bb, 'token_layer', None)})" if getattr(bb, "token_layer", None) else ""))
            for seed, enc in heads:
                benc = EmbeddingBenchEncoder(Embedder(enc, data, profile=cfg, progress=False), "nearid", label)
                benc.seed = seed
                out.append(benc)
            continue
        base, weights = split_weights(name)
        canon = resolve_name(base)
        shared = nearid_enc is not None and resolve_name(nearid_enc.backbone.name) == canon and weights is None
        if shared:
            enc = nearid_enc.backbone          # same backbone object -> same caches
        elif weights == "random":              # the chance reference: the class at a fixed random init
            enc, _ = load_backbone(cfg, name=canon, weights="random")
            emb = Embedder(enc, data, profile=cfg, progress=False, store_tokens=False)
            out.append(EmbeddingBenchEncoder(emb, canon + RANDOM_INIT, _frozen_label(canon, False, random_init=True)))
            continue
        else:
            enc, _ = load_backbone(cfg, name=canon)
        # the head's backbone keeps its tokens (one cache serves both rows); other frozen encoders
        # only need their pooled output (CLIP-L tokens of the paper test set would be ~8 GB)
        emb = Embedder(enc, data, profile=cfg, progress=False, store_tokens=None if shared else False)
        out.append(EmbeddingBenchEncoder(emb, canon, _frozen_label(canon, getattr(enc, "tiny", False))))
    judges, gated = judge_encoders(cfg, judge)
    out.extend(judges)
    for model, why in gated.items():
        print(f"VLM judge {model}: rows skipped, {why}")
        out.gated[judge_name(model)] = why
    scored = {b.name for b in out if b.kind == "pairs"}
    if not judge_models(cfg) and "vlm" not in scored:
        out.gated["vlm"] = judge_gate(None, None, hub.is_available) or ""
    for model in JUDGE_MODELS:          # Table 7's judge scales this profile does not ask for
        if judge_name(model) not in scored | set(out.gated):
            out.gated[judge_name(model)] = f"{model} is not among this profile's judges (eval.vlm_scales)"
    return out
