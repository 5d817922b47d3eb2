"""The experiments of the FPR notebook (FPR paper Tables 1, 5-13, Figures 3-4): the profile's
encoders, the oracle table, the main comparison of methods x encoders, per-identity agreement with
the true drift, the qualitative retrieval lists and the data of a profile, as functions, so the
notebook stays thin and every table comes from tested code. The gallery ablations (Tables 2, 14,
Figures 5, 7) are :mod:`nearid_lib.fpr.ablations`, the claims :mod:`nearid_lib.fpr.claims`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from ..data import build_world
from ..paths import checkpoint_dir, data_dir
from ..seeding import make_rng
from .analysis import drift_agreement
from .encoders import RemoteCodeError, get_encoder
from .layout import FPRSplit, load_fpr_split, read_generated
from .methods import simulate_methods
from .protocol import oracle_scores, rank_generator, top_k_lists

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["EncoderSpec", "encoder_specs", "load_encoders", "main_comparison", "per_identity_agreement",
           "oracle_table", "qualitative_cases", "prepare_data"]


@dataclass
class EncoderSpec:
    """An evaluation encoder of a profile: registry ``name``, load kwargs, whether it runs, why not."""

    name: str
    kwargs: dict = field(default_factory=dict)
    available: bool = True
    note: str = ""
    role: str = "general"          # "general" (CLIP/DINO/frozen GAP) | "specialised"



_SPECIALISED = {"nearid", "bioclip2", "miewid", "classifier"}



def encoder_specs(cfg: Profile, checkpoint_root: Path | None = None) -> list[EncoderSpec]:
    """The profile's retrieval encoders with availability notes: ``nearid`` needs the head trained
    by notebook 03 at ``checkpoint_dir(profile)/"nearid"``; ``miewid`` needs
    ``retrieval.allow_remote_code``; smoke uses tiny random-init configs (``backbone.tiny``)."""
    out = []
    for name in cfg.retrieval.encoders:
        kw: dict[str, Any] = {"tiny": bool(cfg.backbone.tiny)}
        spec = EncoderSpec(name, kw, role="specialised" if name in _SPECIALISED else "general")
        if name == "nearid":
            ck = Path(checkpoint_root or checkpoint_dir(cfg.name)) / "nearid"
            if not ck.exists():
                spec.available = False
                spec.note = f"no trained NearID head at {ck} (run notebook 03 first); skipped"
            kw["checkpoint"] = str(ck)
        if name == "miewid":
            if not cfg.retrieval.allow_remote_code:
                spec.available = False
                spec.note = "MiewID needs trust_remote_code: set retrieval.allow_remote_code=True; skipped"
            kw["allow_remote_code"] = bool(cfg.retrieval.allow_remote_code)
        if name in ("efficientnet-lite0", "frozen-gap") and not cfg.backbone.tiny:
            kw["image_size"] = cfg.backbone.image_size
        out.append(spec)
    return out


def load_encoders(specs: Sequence[EncoderSpec]) -> dict[str, Any]:
    """``{name: model}`` for the available specs, each loaded once; a spec that fails to load is
    marked unavailable with the error as its note (e.g. weights not downloadable offline)."""
    models = {}
    for s in specs:
        if not s.available:
            continue
        try:
            models[s.name] = get_encoder(s.name, **s.kwargs)[0]
        except (OSError, RemoteCodeError, ValueError, KeyError) as err:
            s.available, s.note = False, f"could not load: {type(err).__name__}: {str(err)[:200]}"
    return models


def oracle_table(models: dict, train, gallery, cfg: Profile, cache, dataset: str = "NearID-mini",
                 per_query: bool = False):
    """Paper Table 1 (long form): per encoder and species group (+ "all"): oracle ``sim`` and ``map``
    (``per_query``: also the per-reference APs of every encoder, for the claims' intervals)."""
    rows, pqs = [], []
    for name, m in models.items():
        t, pq = oracle_scores(m, train, gallery, cfg.retrieval.group_by, cache, cfg.retrieval.batch_size,
                              return_per_query=True)
        rows.append(t.assign(encoder=name))
        pqs.append(pq.assign(encoder=name))
    table = pd.concat(rows, ignore_index=True).assign(dataset=dataset)[
        ["dataset", "group", "encoder", "sim", "map", "top1", "n_queries", "n_gallery"]]
    return (table, pd.concat(pqs, ignore_index=True)) if per_query else table


def main_comparison(models: dict, generated, gallery, cfg: Profile, cache, dataset: str = "NearID-mini"
                    ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Paper Figure 3 / Tables 5-13: per method x encoder, pairwise similarity (to ``ref_path``)
    and gallery mAP side by side (+ top-1, ROC-AUC, nDCG). Returns ``(table, per_query, embeddings)``."""
    tabs, pqs, embs = [], [], {}
    for name, m in models.items():
        res = rank_generator(generated, gallery, m, group_by=cfg.retrieval.group_by, cache_dir=cache,
                             batch_size=cfg.retrieval.batch_size)
        s = res.summary.copy()
        s["encoder"] = name
        tabs.append(s)
        pqs.append(res.per_query.assign(encoder=name))
        embs[name] = res.extra
    tab = pd.concat(tabs, ignore_index=True)
    meta = generated.drop_duplicates("method").set_index("method")
    for c in ("drift", "context"):
        if c in meta.columns:
            tab[c] = tab.method.map(meta[c])
    tab.insert(0, "dataset", dataset)
    return tab, pd.concat(pqs, ignore_index=True), embs


def per_identity_agreement(per_query: pd.DataFrame, metric: str = "ap") -> pd.DataFrame:
    """Mean over identities of the Spearman rho between per-identity method scores (mean of
    ``metric``) and negative true drift, per encoder: a finer "ranks methods like the truth"
    than one rho over method means (ties between encoders are rarer)."""
    rows = []
    if "drift" not in per_query.columns:
        return pd.DataFrame(columns=["encoder", "metric", "mean_rho", "n_identities"])
    for enc, d in per_query.groupby("encoder", sort=False):
        rhos, names = [], []
        for name, di in d.groupby("name"):
            names.append(name)
            by = di.groupby("method").agg(v=(metric, "mean"), drift=("drift", "first"))
            r = drift_agreement(by.v, by.drift) if len(by) >= 3 else np.nan
            rhos.append(r)
        rhos = np.asarray(rhos, float)
        rows.append({"encoder": enc, "metric": metric, "mean_rho": float(np.nanmean(rhos)) if np.isfinite(rhos).any()
                     else float("nan"), "n_identities": int(np.isfinite(rhos).sum()),
                     "names": list(names), "rhos": rhos.tolist()})
    return pd.DataFrame(rows)


def qualitative_cases(extra: dict, per_query: pd.DataFrame, encoder: str, methods: Sequence[str],
                      n_identities: int, k: int, group_by: str | None, seed: int = 0) -> list[dict]:
    """Fig. 4 cases: for ``n_identities`` seeded identities and each of ``methods``, the first
    generated image of that identity by that method, its reference and its top-``k`` list."""
    pq = per_query[per_query.encoder == encoder].reset_index(drop=True)
    methods = [m for m in methods if m in set(pq.method)] or list(pq.method.unique())[:3]
    names = sorted(pq.name.unique())
    pick = [names[i] for i in sorted(make_rng(seed, "qualitative").choice(len(names),
                                                                       size=min(n_identities, len(names)),
                                                                       replace=False))]
    gal = extra["gallery"]
    cases = []
    for name in pick:
        for m in methods:
            rows = pq.index[(pq.name == name) & (pq.method == m)]
            if not len(rows):
                continue
            i = int(rows[0])
            q = extra["q_emb"][i:i + 1]
            grp = [pq[group_by].iloc[i]] if group_by else None
            ranked = top_k_lists(q, extra["g_emb"], gal, k, grp, group_by)[0]
            cases.append({"name": name, "reference": pq.ref_path.iloc[i], "generated": pq.file_path.iloc[i],
                          "ranked": ranked,
                          "title": f"{m}\nAP={pq.ap.iloc[i]:.2f} sim={pq.sim.iloc[i]:.2f}"})
    return cases


def prepare_data(cfg: Profile, root: Path | None = None, progress: bool = False):
    """``(split, generated, dataset)`` for notebook 11 (FPR).

    - procedural world (``smoke``/``mini``): build (or reuse) the world, simulate the methods of
      ``cfg.retrieval.methods`` (:func:`~nearid_lib.fpr.methods.simulate_methods`);
    - released data (``paper``): every folder under ``root`` (default ``data_dir(profile)/"fpr"``)
      holding ``train_data.csv`` + ``gallery_data.csv`` is one gallery (e.g. ``cub_sparrow``,
      ``reid_zebra``, ``cars``); its generated images are ``<folder>/generated_data.csv`` and
      ``<folder>/generated/<method>/generated_data.csv``. Names and species are prefixed with the
      folder so galleries never mix (``group_by="species"`` keeps each query in its gallery)."""
    if cfg.world.source == "procedural":
        r = build_world(cfg, root, progress=progress)
        split = load_fpr_split(r / "fpr")
        gen = read_generated(simulate_methods(cfg, r, cfg.retrieval.methods, cfg.retrieval.n_generated_per_id))
        return split, gen, "NearID-mini"
    base = Path(root or data_dir(cfg.name) / "fpr")
    folders = sorted(p.parent for p in base.glob("*/train_data.csv"))
    if not folders:
        raise FileNotFoundError(f"{base}: no <dataset>/train_data.csv (FPR layout) found")
    trains, gals, gens = [], [], []
    for f in folders:
        sp = load_fpr_split(f)
        csvs = ([f / "generated_data.csv"] if (f / "generated_data.csv").exists() else []) + \
            sorted(f.glob("generated/*/generated_data.csv"))
        for t, lst in ((sp.train, trains), (sp.gallery, gals)):
            lst.append(t.assign(name=f.name + "/" + t.name, species=f.name + "/" + t.species, dataset=f.name))
        for c in csvs:
            g = read_generated(c)
            gens.append(g.assign(name=f.name + "/" + g.name, species=f.name + "/" + g.species, dataset=f.name))
    if not gens:
        raise FileNotFoundError(f"{base}: no generated_data.csv for any gallery")
    split = FPRSplit(pd.concat(trains, ignore_index=True), pd.concat(gals, ignore_index=True), base)
    return split, pd.concat(gens, ignore_index=True), "FPR-released"
