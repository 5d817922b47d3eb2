"""NearID-bench evaluation (NearID Section 3.4): embed a split, score SSR/PA per distractor source
and pooled, MTG part-level metrics, and the evaluation of one bench encoder over every benchmark.

Public API (notebooks 03-08 build on it)::

    from nearid_lib.nearid.evaluate import embed_split, nearid_bench, mtg_bench, evaluate_split
    se = embed_split(emb, data, "test", variant="full")         # or variant="fg" (background removed)
    nb = nearid_bench(se, train_sources=data.train_sources)     # per-source + pooled SSR/PA
    mt = mtg_bench(se)                                          # metrics.mtg_metrics dict
    row = evaluate_split(emb, data, "test")                     # one flat row (percent like the paper)

(``emb``: an :class:`~nearid_lib.features.Embedder`.) Missing views are NaN embeddings with
a False mask: they never count as trials. Similarities are cosine (embeddings are L2-normalised).
SSR/PA follow :func:`nearid_lib.metrics.ssr_pa` exactly (PA as the authors' tables define it,
the strict pairwise rate beside it as ``*_pa_strict``); pooled rows are support-weighted
(:func:`nearid_lib.metrics.pool_sources`). Table 1's NearID SSR/PA pool the *main* sources (training
+ unseen fill-based, no structure-conditioned source; :func:`source_groups`), here and in
:func:`nearid_lib.nearid.tables.table1` alike.

:func:`evaluate_encoder` runs a bench encoder (:mod:`nearid_lib.nearid.scorers`) over NearID
(full and FG-only), MTG and DreamBench++ (:mod:`nearid_lib.nearid.dbpp`) into an
:class:`EncoderResult`, the input of the tables of :mod:`nearid_lib.nearid.tables`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .. import metrics
from ..claims.evidence import Evidence
from .dbpp import dbpp_standin
from ..features.embedder import Embedder
from ..data.generators import source_family
from ..data.groups import VIEWS, group_items, image_groups

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["SplitEmbeddings", "embed_split", "nearid_bench", "mtg_bench", "evaluate_split", "summary_row",
           "pool_per_source", "STRUCTURE_FAMILIES", "APART_FAMILIES", "source_family", "is_structure_conditioned",
           "is_reported_apart",
           "source_groups", "main_sources", "EncoderResult", "evaluate_encoder", "backbone_throughput",
           "n_bench_images", "units_from_bench", "unit_outcomes", "encoder_evidence", "mtg_units", "nearid_evidence",
           "EVIDENCE_GROUPS"]


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


def embed_split(embedder: Embedder, data: NearIDData, split: str = "test", variant: str = "full",
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


# --------------------------------------------------------------------------- source groups
# Structure-conditioned sources (rendered from an edge / Canny map of the original instead of filling
# the mask) are reported apart and left out of Table 1's pool (NearID Sec. E.4, Table 5). A source's
# family is its name without a trailing "_hr" (the high-resolution render of the same family); a
# procedural source is structure-conditioned when its family is listed here. The released NearID
# Canny sources are FluxC and FluxC_1024 (FLUX.1-Canny at 512 and 1024 px).
STRUCTURE_FAMILIES: tuple[str, ...] = ("edges",)
# Procedural families reported apart: "hard" changes one attribute where every fill
# generator changes several, so pooling it would mix a kind of change into a comparison of generators.
APART_FAMILIES: tuple[str, ...] = ("hard",)
RELEASED_STRUCTURE_PREFIX = "FluxC"


def is_structure_conditioned(source: str) -> bool:
    """Whether ``source`` is structure-conditioned (Canny-like): a released FluxC source, or a source
    whose family is in :data:`STRUCTURE_FAMILIES`."""
    return source.startswith(RELEASED_STRUCTURE_PREFIX) or source_family(source) in STRUCTURE_FAMILIES


def is_reported_apart(source: str) -> bool:
    """Whether ``source`` is an unseen one-attribute source (a family in :data:`APART_FAMILIES`),
    reported on its own row and pooled in no average."""
    return source_family(source) in APART_FAMILIES


def source_groups(sources: Sequence[str], train_sources: Sequence[str]) -> dict[str, list[str]]:
    """The paper's source groups: ``training``, ``unseen_fill``, ``unseen_canny``
    (structure-conditioned, :func:`is_structure_conditioned`), ``main`` (training + unseen fill:
    Table 1's pool) and ``all`` (main + structure-conditioned: the paper's nine), plus ``apart``
    (unseen sources of :data:`APART_FAMILIES`, in no other group). Empty groups are left out (a
    world without a structure-conditioned source has main = all)."""
    src = list(sources)
    training = [s for s in src if s in set(train_sources)]
    apart = [s for s in src if s not in set(training) and is_reported_apart(s)]
    canny = [s for s in src if is_structure_conditioned(s) and s not in apart]
    fill = [s for s in src if s not in set(training) and s not in canny and s not in apart]
    g = {"training": training, "unseen_fill": fill, "unseen_canny": canny,
         "main": [s for s in src if s not in canny and s not in apart],
         "all": [s for s in src if s not in apart], "apart": apart}
    return {k: v for k, v in g.items() if v}


def main_sources(groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The sources NearID SSR/PA of Table 1 pool (support-weighted): ``main``, else ``all``. The one
    rule behind :func:`summary_row` and :func:`nearid_lib.nearid.tables.table1`."""
    return list(groups.get("main", groups.get("all", [])))


# --------------------------------------------------------------------------- scoring
def pool_per_source(per: dict[str, dict], train_sources: Sequence[str]) -> dict[str, Any]:
    """``{"per_source", "pooled", "table"}`` from per-source :func:`~nearid_lib.metrics.ssr_pa`
    results: ``pooled`` has ``all``, ``main`` (:func:`main_sources`), ``train`` (the training
    sources) and ``unseen`` (the others), the last two only when non-empty; ``table`` is
    :func:`~nearid_lib.metrics.source_breakdown` with the rows ``avg_all``, ``avg_train``, ``avg_unseen``."""
    names = list(per)
    ts = [s for s in train_sources if s in per]
    groups = {"all": names}
    if ts:
        groups["train"] = ts
    unseen = [s for s in names if s not in ts]
    if unseen:
        groups["unseen"] = unseen
    pooled = {k: metrics.pool_sources(per, v) for k, v in groups.items()}
    if names:
        pooled["main"] = metrics.pool_sources(per, main_sources(source_groups(names, ts)))
    return {"per_source": per, "pooled": pooled,
            "table": metrics.source_breakdown(per, {f"avg_{k}": v for k, v in groups.items()})}


def nearid_bench(se: SplitEmbeddings, train_sources: Sequence[str] | None = None,
                 sources: Sequence[str] | None = None, per_identity: bool = False) -> dict[str, Any]:
    """SSR/PA per distractor source and pooled (NearID Table 1 / Table 5), as fractions.

    Returns :func:`pool_per_source` of the split: ``{"per_source": {src: ssr_pa dict}, "pooled":
    {"all", "main", "train", "unseen": pool dict}, "table": DataFrame}``; "train" pools the training
    sources (default ``se.train_sources``), "unseen" the others (absent when empty)."""
    names = list(se.distractors) if sources is None else list(sources)
    per = {}
    for s in names:
        ps, ds = metrics.nearid_similarities(se.positives, se.distractors[s], se.pos_mask, se.dist_mask[s])
        per[s] = metrics.ssr_pa(ps, ds, per_identity=per_identity)
    return pool_per_source(per, se.train_sources if train_sources is None else train_sources)


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
    pooled over the Table 1 sources, :func:`main_sources`; PA as the authors define it, with
    ``nearid_pa_strict`` beside it: :mod:`nearid_lib.metrics.nearid`), ``mtg_mo``, ``mtg_mopair``
    (r), ``mtg_ssr``/``mtg_pa`` (percent), plus ``train_ssr/pa(_strict)`` and
    ``unseen_ssr/pa(_strict)`` (percent) and ``ssr_<source>``/``pa_<source>``/``pa_strict_<source>``."""
    nan = float("nan")
    p = nb["pooled"]
    main = p.get("main", p["all"])
    row: dict[str, Any] = {"nearid_ssr": 100 * main["ssr"], "nearid_pa": 100 * main["pa"],
                           "nearid_pa_strict": 100 * main.get("pa_strict", nan)}
    for k in ("train", "unseen"):
        if k in p:
            row[f"{k}_ssr"], row[f"{k}_pa"] = 100 * p[k]["ssr"], 100 * p[k]["pa"]
            row[f"{k}_pa_strict"] = 100 * p[k].get("pa_strict", nan)
    row.update({"mtg_mo": mt["m_o"] if mt else nan, "mtg_mopair": mt["m_opair"] if mt else nan,
                "mtg_ssr": 100 * mt["ssr"] if mt else nan, "mtg_pa": 100 * mt["pa"] if mt else nan})
    for s, r in nb["per_source"].items():
        row[f"ssr_{s}"], row[f"pa_{s}"] = 100 * r["ssr"], 100 * r["pa"]
        row[f"pa_strict_{s}"] = 100 * r.get("pa_strict", nan)
    row["n_identities"] = main["n_identities"] // max(1, main["n_sources"])
    return row


def evaluate_split(embedder: Embedder, data: NearIDData, split: str = "test", variant: str = "full",
                   sources: Sequence[str] | None = None) -> dict[str, Any]:
    """:func:`embed_split` + :func:`nearid_bench` + :func:`mtg_bench` -> :func:`summary_row`."""
    se = embed_split(embedder, data, split, variant, sources)
    return summary_row(nearid_bench(se, data.train_sources), mtg_bench(se))


# --------------------------------------------------------------------------- per-unit outcomes (claims)
def units_from_bench(nb: dict[str, Any], ids: Sequence[str]) -> pd.DataFrame:
    """Per (identity, source) NearID-bench outcomes from a :func:`nearid_bench` result computed with
    ``per_identity=True`` over identities ``ids`` (the split's row order): ``unit`` (identity id),
    ``source``, ``wins``, ``trials``, ``success`` (identities without a trial of a source are left out).
    These are the rows claims bootstrap over identities (:mod:`nearid_lib.claims`): pooled SSR and
    the strict PA (``pa_strict``, wins / trials of the directed margins) of a set of sources are
    exactly the statistics ``ssr`` / ``pa`` of its rows; claims read the strict PA, the rate their
    criteria were declared on (docs/protocol.md, "PA both ways")."""
    frames = []
    for s, r in nb["per_source"].items():
        if "trials" not in r:
            raise ValueError("units_from_bench: compute nearid_bench(..., per_identity=True)")
        keep = np.asarray(r["trials"]) > 0
        frames.append(pd.DataFrame({"unit": np.asarray(ids, dtype=object)[keep], "source": s,
                                    "wins": np.asarray(r["wins"])[keep], "trials": np.asarray(r["trials"])[keep],
                                    "success": np.asarray(r["success"])[keep]}))
    cols = ["unit", "source", "wins", "trials", "success"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def unit_outcomes(se: SplitEmbeddings, sources: Sequence[str] | None = None) -> pd.DataFrame:
    """:func:`units_from_bench` of a split's embeddings."""
    return units_from_bench(nearid_bench(se, sources=sources, per_identity=True), se.ids)


def mtg_units(se: SplitEmbeddings) -> pd.DataFrame | None:
    """Per MTG pair: the five similarities, the two oracles and the pair's SSR trial outcome (the
    inputs of :func:`mtg_bench`, one row per pair), None without MTG pairs."""
    if se.mtg is None:
        return None
    m = se.mtg

    def s(a, b):
        return (m[a] * m[b]).sum(-1).numpy().astype(np.float64)

    t = pd.DataFrame({"unit": m["pair_id"], "s_1_1p": s("e1", "e1p"), "s_2_2p": s("e2", "e2p"),
                      "s_1_2p": s("e1", "e2p"), "s_2_1p": s("e2", "e1p"), "s_1_2": s("e1", "e2"),
                      "oracle_1": m["oracle_1"], "oracle_2": m["oracle_2"]})
    r = metrics.mtg_ssr_pa(t.s_1_2, t.s_1_1p, t.s_2_2p, per_identity=True)
    return t.assign(wins=r["wins"], trials=r["trials"], success=r["success"])


def encoder_evidence(prefix: str, embedder: Embedder, data: NearIDData, split: str = "test",
                     variants: Sequence[str] = ("full",)) -> dict[str, Evidence]:
    """:func:`nearid_evidence` of one (frozen or trained) encoder scored on ``split``."""
    units, mtg = {}, None
    for v in variants:
        se = embed_split(embedder, data, split, v)
        units[v] = unit_outcomes(se)
        if v == "full":
            mtg = mtg_units(se)
    return nearid_evidence(prefix, units, mtg, data.sources, data.train_sources)


# Evidence groups of NearID-bench (claims name them ``<model>.<variant>.<group>.<stat>``):
# source_groups' names, with "training" shortened to "train" and "unseen_canny" to "structure".
EVIDENCE_GROUPS = {"main": "main", "train": "training", "unseen_fill": "unseen_fill",
                   "structure": "unseen_canny", "all": "all"}


def nearid_evidence(prefix: str, units: Mapping[str, pd.DataFrame], mtg: pd.DataFrame | None,
                    sources: Sequence[str], train_sources: Sequence[str]) -> dict[str, Evidence]:
    """Claims evidence of one model from its per-unit outcomes: ``units`` maps a variant ("full",
    "fg") to :func:`unit_outcomes` tables (optionally with a ``seed`` column: several training
    seeds), ``mtg`` a :func:`mtg_units` table of the full images. Keys: ``<prefix>.<variant>.<group>
    .ssr|pa`` for the groups of :data:`EVIDENCE_GROUPS` that exist, and ``<prefix>.mtg.ssr|pa|mo|mopair``."""
    groups = source_groups(sources, train_sources)
    out: dict[str, Evidence] = {}
    for variant, t in units.items():
        for name, g in EVIDENCE_GROUPS.items():
            members = groups.get(g, main_sources(groups) if g == "main" else None)
            sub = t[t["source"].isin(members)] if members else t.iloc[:0]
            if len(sub):
                for stat in ("ssr", "pa"):
                    out[f"{prefix}.{variant}.{name}.{stat}"] = Evidence(stat, sub, f"{prefix} {variant} {name}")
    if mtg is not None and len(mtg):
        for stat, key in (("ssr", "ssr"), ("pa", "pa"), ("mtg_mo", "mo"), ("mtg_mopair", "mopair")):
            out[f"{prefix}.mtg.{key}"] = Evidence(stat, mtg, f"{prefix} MTG")
    return out


# --------------------------------------------------------------------------- one encoder, every benchmark
@dataclass
class EncoderResult:
    """Everything notebook 04 needs about one encoder (fractions, not percent)."""

    name: str                       # canonical encoder name (or "vlm")
    label: str                      # ours_label
    nearid: dict[str, dict] = field(default_factory=dict)      # variant -> nearid_bench dict
    mtg: dict[str, dict | None] = field(default_factory=dict)  # variant -> mtg_metrics dict
    mtg_scores: dict[str, dict] = field(default_factory=dict)  # variant -> per-pair scores
    dbpp: dict | None = None        # metric_to_human dict (+ "kind": "human" | "procedural")
    dbpp_scores: np.ndarray | None = None
    coverage: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    seed: int | None = None         # training seed of a trained head (None: a frozen encoder)

    def evidence(self, prefix: str, data: NearIDData, split: str = "test") -> dict[str, Evidence]:
        """Claims evidence (:func:`nearid_evidence`) of this encoder's per-identity and per-pair
        outcomes, tagged with its seed."""
        ids = data.positives.loc[data.positives["split"] == split, "id"].tolist()
        tag = {} if self.seed is None else {"seed": self.seed}
        units = {v: units_from_bench(nb, ids).assign(**tag) for v, nb in self.nearid.items()}
        sc = self.mtg_scores.get("full") or {}
        mtg = None
        if sc:
            m = data.mtg[data.mtg["split"] == split]
            mtg = pd.DataFrame({"unit": m["pair_id"].tolist()[:len(sc["s_1_2"])], **sc})
            r = metrics.mtg_ssr_pa(mtg.s_1_2, mtg.s_1_1p, mtg.s_2_2p, per_identity=True)
            mtg = mtg.assign(wins=r["wins"], trials=r["trials"], success=r["success"], **tag)
        return nearid_evidence(prefix, units, mtg, data.sources, data.train_sources)


def evaluate_encoder(benc, data: NearIDData, split: str = "test", variants: Sequence[str] = ("full", "fg"),
                     sources: Sequence[str] | None = None, grid: pd.DataFrame | None = None,
                     dbpp: Callable[[Any], tuple] | None = None, clock: Callable[[], float] = time.perf_counter
                     ) -> EncoderResult:
    """NearID SSR/PA per source and MTG for each variant, plus DB++ (``dbpp(benc)`` for real
    ratings, else the procedural stand-in on ``grid``); timings in ``seconds``."""
    res = EncoderResult(name=benc.name, label=benc.label, seed=getattr(benc, "seed", None))
    for v in variants:
        t0 = clock()
        res.nearid[v] = benc.nearid(data, split, v, sources)
        t1 = clock()
        res.mtg[v], res.mtg_scores[v] = benc.mtg(data, split, v)
        t2 = clock()
        res.seconds[f"nearid_{v}"], res.seconds[f"mtg_{v}"] = t1 - t0, t2 - t1
    t0 = clock()
    if dbpp is not None:
        res.dbpp, res.dbpp_scores = dbpp(benc)
    elif grid is not None and len(grid):
        res.dbpp, res.dbpp_scores = dbpp_standin(benc, data, grid, "full")
    res.seconds["dbpp"] = clock() - t0
    res.coverage = benc.coverage_summary()
    return res


def backbone_throughput(embedder: Embedder, data: NearIDData, n: int = 16, batch_size: int = 16) -> float:
    """Images per second of the frozen backbone on ``n`` dataset images (after one warm-up batch):
    the cost a cold evaluation pays per image before the cached path takes over."""
    rels = data.positives["img1"].tolist()[:n]
    bb = embedder.backbone
    imgs = [data.image(r) for r in rels]
    with torch.no_grad():
        bb(bb.preprocess.batch(imgs[:batch_size]))     # warm-up at the timed batch shape
        t0 = time.perf_counter()
        for i in range(0, len(imgs), batch_size):
            bb(bb.preprocess.batch(imgs[i:i + batch_size]))
    return len(imgs) / max(time.perf_counter() - t0, 1e-9)


def n_bench_images(data: NearIDData, split: str = "test") -> int:
    """Images in one evaluation pass over all sources and MTG for ``split`` (one variant)."""
    return sum(len(group_items(data, g)[0]) for g in image_groups(data, splits=(split,)))
