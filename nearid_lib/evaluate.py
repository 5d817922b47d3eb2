"""NearID-bench evaluation over cached backbone tokens: embed a split, score SSR/PA per source, MTG.

Public API (stable; notebooks 03-08 build on it)::

    from nearid_lib.evaluate import Embedder, embed_split, nearid_bench, mtg_bench, evaluate_split

    enc, _ = load_encoder("efficientnet-lite0")                 # frozen backbone
    emb = Embedder(enc, data, profile="mini")                   # frozen pooled output (the GAP baseline)
    emb = Embedder(enc, data, head=my_map_head, profile="mini") # backbone tokens -> trained head
    emb = Embedder(load_encoder("nearid", checkpoint=ckpt)[0], data, profile="mini")  # same, from a ckpt
    se = embed_split(emb, data, "test", variant="full")         # or variant="fg" (background removed)
    nb = nearid_bench(se, train_sources=data.train_sources)     # per-source + pooled SSR/PA
    mt = mtg_bench(se)                                          # metrics.mtg_metrics dict
    row = evaluate_split(emb, data, "test")                     # one flat row (percent like the paper)

Design: images are grouped (``"positives@<split>"``, ``"dist:<source>@<split>"``, ``"mtg@<split>"``)
and every group gets its own :class:`~nearid_lib.features.TokenCache` per variant. Training and
evaluation therefore share the same caches, and a notebook that only needs the test split of one
source only builds the groups it touches. ``variant="fg"`` blacks the background out with the
object mask (a distractor uses the mask of the view it was inpainted into; an MTG image uses its
object mask). Missing views are NaN embeddings with a False mask: they never count as trials.

Similarities are cosine (embeddings are L2-normalised here). SSR/PA follow
:func:`nearid_lib.metrics.ssr_pa` exactly; pooled rows are support-weighted
(:func:`nearid_lib.metrics.pool_sources`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from . import metrics

__all__ = ["Embedder", "SplitEmbeddings", "image_groups", "group_items", "embed_split", "nearid_bench",
           "mtg_bench", "evaluate_split", "summary_row", "VIEWS", "SPLITS"]

VIEWS = (1, 2, 3)


# --------------------------------------------------------------------------- image groups
SPLITS = ("train", "val", "test")


def image_groups(data, splits: Sequence[str] = SPLITS, sources: Sequence[str] | None = None,
                 mtg: bool = True) -> list[str]:
    """Image groups ``<kind>@<split>``: kind = ``positives``, ``dist:<source>`` (default: every
    source), ``mtg`` (if present). One cache per group and variant, so training only encodes the
    train split of the training sources, and evaluation only val/test."""
    kinds = ["positives"] + [f"dist:{s}" for s in (data.sources if sources is None else sources)]
    if mtg and data.mtg is not None and len(data.mtg):
        kinds.append("mtg")
    return [f"{k}@{sp}" for k in kinds for sp in splits]


def group_items(data, group: str) -> tuple[list[str], list[str]]:
    """``(relpaths, masks)`` of every image in ``group`` = ``<kind>@<split>`` (table order, no empties).

    Distractor ``nimg_k`` uses ``mask_k`` (it is inpainted into that view's background and mask);
    MTG originals and their part edits use the image's object mask."""
    group, _, split = group.partition("@")
    if split not in SPLITS:
        raise KeyError(f"image group {group!r}: split {split!r} must be one of {SPLITS} (name kind@split)")
    sel = (data.positives["split"] == split).to_numpy()
    pos = data.positives[sel]
    rels: list[str] = []
    masks: list[str] = []
    if group == "positives":
        for k in VIEWS:
            ok = pos[f"img{k}"] != ""
            rels += pos.loc[ok, f"img{k}"].tolist()
            masks += pos.loc[ok, f"mask{k}"].tolist()
    elif group.startswith("dist:"):
        src = group[5:]
        if src not in data.distractors:
            raise KeyError(f"unknown distractor source {src!r}; valid: {', '.join(data.distractors)}")
        d = data.distractors[src][sel]
        for k in VIEWS:
            ok = (d[f"nimg{k}"] != "").to_numpy()
            rels += d.loc[ok, f"nimg{k}"].tolist()
            masks += pos.loc[ok, f"mask{k}"].tolist()
    elif group == "mtg":
        if data.mtg is None:
            raise KeyError("dataset has no mtg.csv")
        m = data.mtg[data.mtg["split"] == split]
        for j in (1, 2):
            for kind in ("original", "inpainted"):
                rels += m[f"image_{j}_{kind}"].tolist()
                masks += m[f"image_{j}_object_mask"].tolist()
    else:
        raise KeyError(f"unknown image group {group!r}; valid: positives, dist:<source>, mtg")
    return rels, masks


# --------------------------------------------------------------------------- embedder
class Embedder:
    """L2-normalised embeddings of dataset images, from cached frozen-backbone features.

    Args:
        encoder: from :func:`nearid_lib.models.load_encoder`. A ``NearIDEncoder`` (backbone + head)
            pools its backbone's cached tokens with its head; a plain backbone gives its own pooled
            output (frozen baseline: EfficientNet GAP, SigLIP's MAP head, CLIP/DINO CLS), unless
            ``head`` is given.
        data: the :class:`~nearid_lib.data.NearIDData` whose images are embedded.
        head: optional :class:`~nearid_lib.models.MAPHead` applied to the backbone's tokens.
        profile: selects the default cache folder (``cache_dir(profile) / "features"``).
        use_cache: False runs the backbone on the images at every call (slow; for checks).
        store_tokens: keep the tokens in the cache (default: when the backbone has tokens; the
            cache key includes it, so keep it the same everywhere to share caches).
        cache_root: explicit cache folder (tests).
    """

    def __init__(self, encoder, data, head=None, profile: str | None = None, use_cache: bool = True,
                 store_tokens: bool | None = None, batch_size: int = 64, cache_root=None,
                 progress: bool = True, head_batch: int = 512):
        self.encoder = encoder
        self.backbone = getattr(encoder, "backbone", encoder)
        if head is None and hasattr(encoder, "head") and hasattr(encoder, "backbone"):
            head = encoder.head
        self.head = head
        self.data, self.profile, self.use_cache = data, profile, use_cache
        self.batch_size, self.cache_root, self.progress, self.head_batch = batch_size, cache_root, progress, head_batch
        has_tokens = int(getattr(self.backbone, "n_tokens", 0) or 0) > 0
        self.store_tokens = has_tokens if store_tokens is None else bool(store_tokens)
        if head is not None and not self.store_tokens:
            raise ValueError("a head needs the backbone's tokens: store_tokens must be True")
        self._caches: dict[tuple[str, str], Any] = {}      # (variant, group) -> TokenCache
        self._index: dict[str, dict[str, tuple[str, int]]] = {}   # variant -> relpath -> (group, row)
        self._owner: dict[str, tuple[str, str]] | None = None     # relpath -> (group, mask)

    # -- caches
    def _owners(self) -> dict[str, tuple[str, str]]:
        if self._owner is None:
            own: dict[str, tuple[str, str]] = {}
            for g in image_groups(self.data):
                for r, m in zip(*group_items(self.data, g)):
                    own.setdefault(r, (g, m))
            self._owner = own
        return self._owner

    def cache(self, group: str, variant: str = "full"):
        """The :class:`TokenCache` of one image group and variant (built on first use)."""
        key = (variant, group)
        if key not in self._caches:
            from .features import TokenCache

            rels, masks = group_items(self.data, group)
            c = TokenCache.build_or_load(self.backbone, rels, masks=masks, variant=variant, data=self.data,
                                         profile=self.profile, cache_root=self.cache_root,
                                         batch_size=self.batch_size, store_tokens=self.store_tokens,
                                         progress=self.progress)
            self._caches[key] = c
            idx = self._index.setdefault(variant, {})
            for r, row in c.index.items():
                idx.setdefault(r, (group, row))
        return self._caches[key]

    def build(self, groups: Iterable[str] | None = None, variants: Sequence[str] = ("full",)) -> None:
        """Build (or load) the caches of ``groups`` (default: all) for each variant."""
        for v in variants:
            for g in (image_groups(self.data) if groups is None else groups):
                self.cache(g, v)

    def _locate(self, relpaths: Sequence[str], variant: str) -> list[tuple[str, int]]:
        idx = self._index.setdefault(variant, {})
        out = []
        for r in relpaths:
            if r not in idx:
                own = self._owners().get(r)
                if own is None:
                    raise KeyError(f"{r!r} is not an image of the dataset at {self.data.root}")
                self.cache(own[0], variant)
            out.append(idx[r])
        return out

    # -- features
    def tokens(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        """Backbone tokens [n, N, D] (float32) of ``relpaths`` (from the caches)."""
        return self._gather(relpaths, variant, "tokens")

    def pooled(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        """The backbone's own pooled outputs [n, E] (not normalised)."""
        return self._gather(relpaths, variant, "pooled")

    def _gather(self, relpaths, variant, what):
        loc = self._locate(relpaths, variant)
        groups = sorted({g for g, _ in loc})
        out = None
        for g in groups:
            sel = [i for i, (gg, _) in enumerate(loc) if gg == g]
            rows = np.asarray([loc[i][1] for i in sel], dtype=np.int64)
            c = self._caches[(variant, g)]
            t = c.tokens(rows) if what == "tokens" else c.pooled(rows)
            if out is None:
                out = torch.empty((len(relpaths),) + tuple(t.shape[1:]), dtype=t.dtype)
            out[torch.as_tensor(sel)] = t
        if out is None:
            dim = (self.backbone.n_tokens, self.backbone.token_dim) if what == "tokens" else (self.backbone.embed_dim,)
            out = torch.zeros((0,) + dim)
        return out

    @torch.no_grad()
    def embed(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        """L2-normalised embeddings [n, E] (float32, CPU) of dataset images."""
        relpaths = list(relpaths)
        if not self.use_cache:
            return self._embed_uncached(relpaths, variant)
        if self.head is None:
            return F.normalize(self.pooled(relpaths, variant).float(), dim=-1)
        was = self.head.training
        self.head.eval()
        p = next(self.head.parameters())
        outs = []
        try:
            for i in range(0, len(relpaths), self.head_batch):
                tok = self.tokens(relpaths[i:i + self.head_batch], variant)
                outs.append(self.head(tok.to(device=p.device, dtype=p.dtype)).float().cpu())
        finally:
            self.head.train(was)
        if not outs:
            return torch.zeros(0, self.head.out_dim)
        return F.normalize(torch.cat(outs), dim=-1)

    def _embed_uncached(self, relpaths: list[str], variant: str) -> torch.Tensor:
        from .features import apply_variant

        own = self._owners()
        outs = []
        for i in range(0, len(relpaths), self.batch_size):
            imgs = []
            for r in relpaths[i:i + self.batch_size]:
                m = own.get(r, (None, ""))[1]
                mk = self.data.mask(m) if (variant != "full" and m) else None
                imgs.append(apply_variant(self.data.image(r), mk, variant))
            pix = self.backbone.preprocess.batch(imgs)
            with torch.no_grad():
                out = self.backbone(pix)
                if self.head is None:
                    e = out.pooled
                else:
                    was = self.head.training
                    self.head.eval()
                    p = next(self.head.parameters())
                    e = self.head(out.tokens.to(device=p.device, dtype=p.dtype))
                    self.head.train(was)
            outs.append(e.float().cpu())
        if not outs:
            return torch.zeros(0, self.backbone.embed_dim if self.head is None else self.head.out_dim)
        return F.normalize(torch.cat(outs), dim=-1)


# --------------------------------------------------------------------------- split embeddings
@dataclass
class SplitEmbeddings:
    """Embeddings of one split (row order = ``data.positives`` restricted to the split).

    ``positives`` [N,3,E] (NaN where a view is missing) with ``pos_mask`` [N,3];
    ``distractors[source]`` [N,3,E] (slot k = the distractor inpainted into view k) with
    ``dist_mask[source]`` [N,3]; ``mtg`` = dict of ``e1, e2, e1p, e2p`` [M,E], ``oracle_1``,
    ``oracle_2`` [M], ``pair_id`` (None when the split has no MTG pair)."""

    split: str
    variant: str
    ids: list[str]
    positives: torch.Tensor
    pos_mask: torch.Tensor
    distractors: dict[str, torch.Tensor] = field(default_factory=dict)
    dist_mask: dict[str, torch.Tensor] = field(default_factory=dict)
    mtg: dict[str, Any] | None = None
    train_sources: list[str] = field(default_factory=list)


def _slots(embedder: Embedder, table, cols: Sequence[str], variant: str, dim: int | None):
    """[N,3,E] embeddings of the non-empty cells of ``table[cols]`` (NaN elsewhere) and the mask [N,3]."""
    cells = table[list(cols)].to_numpy()
    mask = cells != ""
    flat = [str(c) for c in cells[mask]]
    e = embedder.embed(flat, variant)
    E = e.shape[1] if len(flat) else (dim or 1)
    out = torch.full((len(table), len(cols), E), float("nan"))
    out[torch.from_numpy(mask)] = e
    return out, torch.from_numpy(mask)


def embed_split(embedder: Embedder, data, split: str = "test", variant: str = "full",
                sources: Sequence[str] | None = None, with_mtg: bool = True) -> SplitEmbeddings:
    """Embed the positives, every distractor source (default: all of ``data.sources``) and the MTG
    pairs of ``split`` with ``embedder`` for ``variant`` ("full" | "fg")."""
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be train, val or test, got {split!r}")
    sel = (data.positives["split"] == split).to_numpy()
    pos = data.positives[sel]
    pe, pm = _slots(embedder, pos, [f"img{k}" for k in VIEWS], variant, None)
    se = SplitEmbeddings(split=split, variant=variant, ids=pos["id"].tolist(), positives=pe, pos_mask=pm,
                         train_sources=list(data.train_sources))
    for s in (data.sources if sources is None else sources):
        if s not in data.distractors:
            raise KeyError(f"unknown distractor source {s!r}; valid: {', '.join(data.distractors)}")
        d = data.distractors[s][sel]
        se.distractors[s], se.dist_mask[s] = _slots(embedder, d, [f"nimg{k}" for k in VIEWS], variant,
                                                    pe.shape[-1])
    if with_mtg and data.mtg is not None:
        m = data.mtg[data.mtg["split"] == split]
        if len(m):
            se.mtg = {
                "pair_id": m["pair_id"].tolist(),
                "e1": embedder.embed(m["image_1_original"].tolist(), variant),
                "e2": embedder.embed(m["image_2_original"].tolist(), variant),
                "e1p": embedder.embed(m["image_1_inpainted"].tolist(), variant),
                "e2p": embedder.embed(m["image_2_inpainted"].tolist(), variant),
                "oracle_1": m["oracle_1"].to_numpy(dtype=float),
                "oracle_2": m["oracle_2"].to_numpy(dtype=float),
            }
    return se


# --------------------------------------------------------------------------- scoring
def nearid_bench(se: SplitEmbeddings, train_sources: Sequence[str] | None = None,
                 sources: Sequence[str] | None = None, per_identity: bool = False) -> dict[str, Any]:
    """SSR/PA per distractor source and pooled (NearID Table 1 / Table 5), as fractions.

    Returns ``{"per_source": {src: ssr_pa dict}, "pooled": {"all", "train", "unseen": pool dict},
    "table": DataFrame}``; "train" pools the training sources (default ``se.train_sources``),
    "unseen" the others (absent when empty)."""
    names = list(se.distractors) if sources is None else list(sources)
    per = {}
    for s in names:
        ps, ds = metrics.nearid_similarities(se.positives, se.distractors[s], se.pos_mask, se.dist_mask[s])
        per[s] = metrics.ssr_pa(ps, ds, per_identity=per_identity)
    ts = [s for s in (se.train_sources if train_sources is None else train_sources) if s in per]
    unseen = [s for s in names if s not in ts]
    groups = {"all": names}
    if ts:
        groups["train"] = ts
    if unseen:
        groups["unseen"] = unseen
    pooled = {k: metrics.pool_sources(per, v) for k, v in groups.items()}
    table = metrics.source_breakdown(per, {f"avg_{k}": v for k, v in groups.items()})
    return {"per_source": per, "pooled": pooled, "table": table}


def mtg_bench(se: SplitEmbeddings) -> dict[str, Any] | None:
    """MTG M-O, M-Opair, SSR, PA (``metrics.mtg_metrics``) of the split's MTG pairs, None without any."""
    if se.mtg is None:
        return None
    m = se.mtg

    def s(a, b):
        return (m[a] * m[b]).sum(-1).numpy().astype(np.float64)   # cosine: rows are normalised

    return metrics.mtg_metrics(s("e1", "e1p"), s("e2", "e2p"), s("e1", "e2p"), s("e2", "e1p"), s("e1", "e2"),
                               m["oracle_1"], m["oracle_2"])


def summary_row(nb: dict[str, Any], mt: dict[str, Any] | None) -> dict[str, Any]:
    """One flat row with the paper's column names and units: ``nearid_ssr``/``nearid_pa`` (percent,
    pooled over all sources), ``mtg_mo``, ``mtg_mopair`` (r), ``mtg_ssr``/``mtg_pa`` (percent), plus
    ``train_ssr/pa`` and ``unseen_ssr/pa`` (percent) and ``ssr_<source>``/``pa_<source>``."""
    p = nb["pooled"]
    row: dict[str, Any] = {"nearid_ssr": 100 * p["all"]["ssr"], "nearid_pa": 100 * p["all"]["pa"]}
    for k in ("train", "unseen"):
        if k in p:
            row[f"{k}_ssr"], row[f"{k}_pa"] = 100 * p[k]["ssr"], 100 * p[k]["pa"]
    nan = float("nan")
    row.update({"mtg_mo": mt["m_o"] if mt else nan, "mtg_mopair": mt["m_opair"] if mt else nan,
                "mtg_ssr": 100 * mt["ssr"] if mt else nan, "mtg_pa": 100 * mt["pa"] if mt else nan})
    for s, r in nb["per_source"].items():
        row[f"ssr_{s}"], row[f"pa_{s}"] = 100 * r["ssr"], 100 * r["pa"]
    row["n_identities"] = p["all"]["n_identities"] // max(1, p["all"]["n_sources"])
    return row


def evaluate_split(embedder: Embedder, data, split: str = "test", variant: str = "full",
                   sources: Sequence[str] | None = None) -> dict[str, Any]:
    """:func:`embed_split` + :func:`nearid_bench` + :func:`mtg_bench` -> :func:`summary_row`."""
    se = embed_split(embedder, data, split, variant, sources)
    return summary_row(nearid_bench(se, data.train_sources), mtg_bench(se))
