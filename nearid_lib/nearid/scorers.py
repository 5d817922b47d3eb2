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

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .. import hub
from ..data.groups import group_items
from ..features import FeatureStore, apply_variant, dataset_refs, dataset_scope, embed
from ..judge import VLMJudge, read_prompt_file, score_pairs_sharded
from ..models import RANDOM_INIT, NearIDEncoder, load_backbone, load_encoder, resolve_name, split_weights
from ..models.registry import RELEASE_REPO
from ..paths import cache_dir, checkpoint_dir
from .embedder import Embedder
from .evaluate import embed_split, nearid_bench
from .pairs import mtg_from_scores, mtg_pairs, nearid_from_pair_scores, nearid_pairs

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["CosinePairScorer", "PairBenchEncoder", "EmbeddingBenchEncoder", "StoreEmbedder", "StoreBenchEncoder", "load_bench_encoders", "judge_encoder",
           "judge_answers_dir"]


class CosinePairScorer:
    """Pair scores as cosine similarities of precomputed embeddings (``lookup[relpath] -> [E]``);
    the pair-based path of an embedding encoder, e.g. to check it against the embedding path."""

    def __init__(self, lookup: Mapping[str, np.ndarray], name: str = "cosine"):
        self.lookup, self.name = lookup, name

    def score_pairs(self, images_a: Sequence[str], images_b: Sequence[str]):
        a = np.stack([np.asarray(self.lookup[x], float) for x in images_a]) if images_a else np.zeros((0, 1))
        b = np.stack([np.asarray(self.lookup[x], float) for x in images_b]) if images_b else np.zeros((0, 1))
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        return (a * b).sum(1)


class PairBenchEncoder:
    """A bench encoder that scores image pairs directly (the VLM judge).

    ``scorer.score_pairs(images_a, images_b)`` returns a :class:`~nearid_lib.judge.JudgeScores` or a
    plain array; with ``load_images=True`` it receives PIL images (after the full/FG variant), else
    the relpaths. Judge answers with no score are NaN, their trials are dropped, and ``coverage``
    keeps, per (benchmark, variant), how many pairs were scored.

    Under ``torchrun`` / ``accelerate launch`` the pairs are judged by every process
    (:func:`~nearid_lib.judge.score_pairs_sharded`: whole batches per process, answers gathered to
    every process, so the tables rank 0 writes equal one process's); ``answers_dir`` keeps every
    answer (one file per rank) so that a killed run resumes and a rerun over the same pairs reads
    them instead of judging again (:func:`load_bench_encoders` gives a real judge one under the
    profile's cache, keyed by the judge's fingerprint)."""

    kind = "pairs"

    def __init__(self, scorer, name: str = "vlm", label: str | None = None, load_images: bool = True,
                 max_ids: int | None = None, answers_dir: str | Path | None = None):
        self.scorer, self.name, self.label = scorer, name, label or getattr(scorer, "name", name)
        self.load_images, self.max_ids = load_images, max_ids
        self.answers_dir = answers_dir
        self.coverage: dict[str, dict] = {}
        self._memo: dict[tuple, float] = {}

    def _prep(self, data: NearIDData, rel, mask, variant):
        if not self.load_images:
            return rel
        mk = data.mask(mask) if variant != "full" else None
        return apply_variant(data.image(rel), mk, variant)

    def pair_scores(self, data: NearIDData, pairs: Sequence[tuple], variant: str = "full", tag: str = "pairs") -> np.ndarray:
        """Scores of (img_a, mask_a, img_b, mask_b) pairs; repeated pairs are scored once."""
        todo = [p for p in dict.fromkeys((p[0], p[1], p[2], p[3], variant) for p in pairs) if p not in self._memo]
        if todo:
            def load(idx):     # only the pairs of this process's batches are read
                return ([self._prep(data, todo[i][0], todo[i][1], variant) for i in idx],
                        [self._prep(data, todo[i][2], todo[i][3], variant) for i in idx])

            res = score_pairs_sharded(self.scorer, ["|".join(map(str, p)) for p in todo], load,
                                      answers_dir=self.answers_dir)
            sc = np.asarray(getattr(res, "scores", res), dtype=np.float64)
            for p, s in zip(todo, sc):
                self._memo[p] = float(s)
            cov = self.coverage.setdefault(f"{tag}:{variant}", {"n": 0, "n_covered": 0, "status": {}})
            cov["n"] += len(todo)
            cov["n_covered"] += int(np.isfinite(sc).sum())
            for st in getattr(res, "status", []):
                cov["status"][st] = cov["status"].get(st, 0) + 1
        return np.array([self._memo[(p[0], p[1], p[2], p[3], variant)] for p in pairs], dtype=np.float64)

    def nearid(self, data: NearIDData, split: str = "test", variant: str = "full", sources: Sequence[str] | None = None):
        srcs = list(data.sources if sources is None else sources)
        pr = nearid_pairs(data, split, srcs, self.max_ids)
        pos_s = self.pair_scores(data, [p[3:] for p in pr["pos"]], variant, "nearid")
        dist_s = {s: self.pair_scores(data, [p[2:] for p in pr["dist"][s]], variant, "nearid") for s in srcs}
        return nearid_from_pair_scores(len(pr["ids"]), pr["pos"], pos_s, pr["dist"], dist_s, data.train_sources)

    def mtg(self, data: NearIDData, split: str = "test", variant: str = "full"):
        m, sets = mtg_pairs(data, split, self.max_ids)
        return mtg_from_scores(m, {k: self.pair_scores(data, v, variant, "mtg") for k, v in sets.items()})

    def grid_scores(self, data: NearIDData, gp: pd.DataFrame, variant: str = "full") -> np.ndarray:
        out = np.full(len(gp), np.nan)
        keep = np.ones(len(gp), bool)
        if self.max_ids is not None and len(gp):
            # the cost cap applies here too: only the first max_ids anchors are judged
            keep = gp["anchor_id"].isin(list(dict.fromkeys(gp["anchor_id"]))[:self.max_ids]).to_numpy()
        sub = gp[keep]
        out[keep] = self.pair_scores(data, list(zip(sub["ref"], sub["ref_mask"], sub["img"], sub["mask"])),
                                     variant, "dbpp")
        return out

    def coverage_summary(self) -> dict[str, float]:
        """``coverage_<benchmark>_<variant>`` = scored / judged pairs, plus overall ``coverage``."""
        out = {f"coverage_{k.replace(':', '_')}": v["n_covered"] / v["n"] if v["n"] else float("nan")
               for k, v in self.coverage.items()}
        n = sum(v["n"] for v in self.coverage.values())
        out["coverage"] = sum(v["n_covered"] for v in self.coverage.values()) / n if n else float("nan")
        out["n_judged"] = n
        return out


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


def _release_encoder(cfg: Profile, data: NearIDData):
    """The authors' released NearID model (``Aleksandar/nearid-siglip2``: their SigLIP2 tower and
    trained MAP head, through the hub resolver) as a bench encoder, or None with the reason printed
    when the local mirror lacks it."""
    if not hub.is_available(RELEASE_REPO):
        print(f"nearid-release: row skipped, {RELEASE_REPO} is not in the local hub mirror; fetch it with\n  "
              + hub.download_command(RELEASE_REPO, "model", hub.hub_dir()))
        return None
    enc, _ = load_encoder("nearid", checkpoint=RELEASE_REPO)
    enc.eval()
    label = f"NearID released weights ({RELEASE_REPO}: tower {enc.backbone.weights or enc.backbone.name} + head)"
    return EmbeddingBenchEncoder(Embedder(enc, data, profile=cfg, progress=False), "nearid-release", label)


def judge_answers_dir(cfg: Profile, judge) -> Path | None:
    """Where a real judge's answers are kept (per pair, per judge fingerprint): a killed evaluation
    resumes, a rerun -- or notebook 04 after the launched judge step (:mod:`.judge_step`) -- reads
    them instead of judging again. None for the tiny test judge."""
    if cfg.eval.vlm_judge in (None, "tiny") or not hasattr(judge, "fingerprint"):
        return None
    fp = hashlib.sha1(json.dumps(judge.fingerprint(), sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir(cfg.name) / "judge_answers" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', judge.name)}-{fp}"


def judge_encoder(cfg: Profile, judge=None, device: str | None = None) -> PairBenchEncoder | None:
    """The VLM judge of ``cfg.eval.vlm_judge`` as a bench encoder (None without one): its prompt
    (``judge.prompt_file``, the authors' template after the two images, or ours), its cost cap
    ``eval.vlm_max_ids`` and its answers folder (:func:`judge_answers_dir`). ``judge`` overrides the
    judge object (tests)."""
    if judge is None and not cfg.eval.vlm_judge:
        return None
    pk = ({"prompt": read_prompt_file(cfg.judge.prompt_file), "prompt_after_images": True}
          if cfg.judge.prompt_file else {})
    if judge is None:
        if cfg.eval.vlm_judge == "tiny":
            judge = VLMJudge.tiny(max_new_tokens=cfg.eval.vlm_max_new_tokens, batch_size=cfg.eval.vlm_batch_size, **pk)
        else:
            dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
            judge = VLMJudge.from_pretrained(cfg.eval.vlm_judge, device=dev, max_new_tokens=cfg.eval.vlm_max_new_tokens,
                                             batch_size=cfg.eval.vlm_batch_size, **pk)
    label = f"VLM judge {judge.name} (score/10)" + (f", prompt {Path(cfg.judge.prompt_file).name}"
                                                    if cfg.judge.prompt_file else "")
    if cfg.eval.vlm_max_ids:
        label += f", first {cfg.eval.vlm_max_ids} ids/pairs only"
    return PairBenchEncoder(judge, "vlm", label, max_ids=cfg.eval.vlm_max_ids, answers_dir=judge_answers_dir(cfg, judge))


def load_bench_encoders(cfg: Profile, data: NearIDData, checkpoint=None, judge=None,
                        checkpoints: Sequence[tuple[int, str | Path]] | None = None) -> list:
    """The bench encoders of ``cfg.eval.encoders`` (+ the VLM judge of ``cfg.eval.vlm_judge``).

    ``nearid`` loads the trained head of every ``(seed, folder)`` in ``checkpoints`` (one bench
    encoder per seed, ``.seed`` set; default: the single ``checkpoint``, else ``checkpoint_dir(profile)
    / "nearid"``); the heads share one backbone object, and a frozen encoder with the same backbone
    reuses it too, so all read the same feature caches. ``nearid-release`` is the authors' released
    model (their tower and head, :func:`_release_encoder`). ``judge`` overrides the judge object (tests)."""
    out = []
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
        if name == "nearid-release":
            rel = _release_encoder(cfg, data)
            if rel is not None:
                out.append(rel)
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
    bj = judge_encoder(cfg, judge)
    if bj is not None:
        out.append(bj)
    return out
