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
from ..data.fpr_layout import FPRSplit, load_fpr_split, read_fpr_table, read_generated, resolve_paths
from ..models import load_encoder, resolve_device, split_weights
from ..paths import checkpoint_dir, data_dir, downloads_dir
from ..runtime.seeding import make_rng
from .analysis import drift_agreement
from .bg_removal import removed_tables, weights_reason
from .downloads import DATASET_KEYS, GENERATED_DIRNAME, POOL_CSV, attach_generated, build_paper_galleries
from .generation import generate_fpr, generated_root
from .encoders import RemoteCodeError
from .methods import simulate_methods
from .protocol import oracle_scores, rank_generator, top_k_lists

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["EncoderSpec", "FPRRun", "run_fpr", "encoder_specs", "load_encoders", "main_comparison",
           "per_identity_agreement", "oracle_table", "qualitative_cases", "prepare_data", "method_sources", "skip_reasons", "sampling_size", "GLOBAL_TABLES",
           "ablation_pool_of", "sampling_encoder", "background_removed"]


@dataclass
class EncoderSpec:
    """An evaluation encoder of a profile: registry ``name``, load kwargs, whether it runs, why not."""

    name: str
    kwargs: dict = field(default_factory=dict)
    available: bool = True
    note: str = ""
    role: str = "general"          # "general" (CLIP/DINO/frozen GAP) | "specialised" | "chance" (random init)



_SPECIALISED = {"nearid", "bioclip2", "miewid", "miewid-msv3", "classifier"}
NEARID_RELEASE = "Aleksandar/nearid-siglip2"



def encoder_specs(cfg: Profile, checkpoint_root: Path | None = None) -> list[EncoderSpec]:
    """The profile's retrieval encoders with availability notes: ``nearid`` needs the head trained
    by notebook 03 at ``checkpoint_dir(profile)/"nearid"``; ``miewid`` needs
    ``retrieval.allow_remote_code``; smoke uses tiny random-init configs (``backbone.tiny``)."""
    out = []
    for name in cfg.retrieval.encoders:
        kw: dict[str, Any] = {"tiny": bool(cfg.backbone.tiny)}
        base, weights = split_weights(name)
        if weights == "random":
            kw["weights"] = "random"      # "<encoder>@random": the chance reference
        spec = EncoderSpec(name, kw, role=("chance" if weights else
                                           "specialised" if name in _SPECIALISED else "general"))
        if name == "nearid":
            ck = Path(checkpoint_root or checkpoint_dir(cfg.name)) / "nearid"
            kw["checkpoint"] = str(ck)
            if not ck.exists() and cfg.world.source == "released":
                # the paper profile without notebook 03's head: the authors' released weights
                kw["checkpoint"] = NEARID_RELEASE
                spec.note = (f"no trained NearID head at {ck}: scoring the released weights "
                             f"{NEARID_RELEASE}")
            elif not ck.exists():
                spec.available = False
                spec.note = f"no trained NearID head at {ck} (run notebook 03 first); skipped"
        if base in ("miewid", "miewid-msv3"):      # msv2: the authors' (the paper's row); msv3: an extra row
            if not cfg.retrieval.allow_remote_code:
                spec.available = False
                spec.note = ("MiewID runs code from its hub repo (trust_remote_code): opt in with "
                             "NEARID_SET='retrieval.allow_remote_code=true'; its rows are skipped")
            kw["allow_remote_code"] = bool(cfg.retrieval.allow_remote_code)
        if base in ("efficientnet-lite0", "frozen-gap") and not cfg.backbone.tiny:
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
            models[s.name] = load_encoder(s.name, cache=True, **s.kwargs)[0]
        except (OSError, RemoteCodeError, ValueError, KeyError, RuntimeError) as err:
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


def main_comparison(models: dict, generated, gallery, cfg: Profile, cache, dataset: str = "NearID-mini",
                    progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Paper Figure 3 / Tables 5-13: per method x encoder, pairwise similarity (to ``ref_path``)
    and gallery mAP side by side (+ top-1, ROC-AUC, nDCG). Returns ``(table, per_query, embeddings)``."""
    tabs, pqs, embs = [], [], {}
    for name, m in models.items():
        res = rank_generator(generated, gallery, m, group_by=cfg.retrieval.group_by, cache_dir=cache,
                             batch_size=cfg.retrieval.batch_size, progress=progress)
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


@dataclass
class FPRRun:
    """What :func:`run_fpr` returns. ``oracle`` / ``oracle_per_query``: FPR Table 1 (references as
    queries) per encoder and group, and each reference's AP; ``main`` / ``per_query``: per method x
    encoder (sim, mAP, top-1, AUC, nDCG, true drift and context where known) and per generated
    image; ``extras``: each encoder's embeddings; ``agreement``: per encoder and metric (``ap``,
    ``sim``), the mean per-identity Spearman rho with the negative true drift. Parts a run could
    not produce (no references, no generated images) are None."""

    oracle: pd.DataFrame | None = None
    oracle_per_query: pd.DataFrame | None = None
    main: pd.DataFrame | None = None
    per_query: pd.DataFrame | None = None
    extras: dict = field(default_factory=dict)
    agreement: pd.DataFrame | None = None

    def agreement_of(self, metric: str = "ap") -> pd.DataFrame | None:
        """The ``agreement`` rows of one metric (``"ap"``: mAP, ``"sim"``: pairwise similarity)."""
        if self.agreement is None:
            return None
        return self.agreement[self.agreement.metric == metric].reset_index(drop=True)


def run_fpr(models: dict, split: FPRSplit, generated: pd.DataFrame | None, cfg: Profile, cache,
            dataset: str = "NearID-mini", oracle: bool = True, progress: bool = True) -> FPRRun:
    """The Finer-Personalization Rank protocol for every encoder of ``models`` (name -> model): the
    oracle (:func:`oracle_table`, when ``oracle``), the main comparison of the generated images
    (:func:`main_comparison`, when there are any) and each metric's per-identity agreement with the
    true drift (:func:`per_identity_agreement`). Notebook 11 and :func:`nearid_lib.score_encoder`
    both run it."""
    out = FPRRun()
    if oracle:
        out.oracle, out.oracle_per_query = oracle_table(models, split.train, split.gallery, cfg, cache, dataset,
                                                        per_query=True)
    if generated is not None and len(generated):
        out.main, out.per_query, out.extras = main_comparison(models, generated, split.gallery, cfg, cache, dataset,
                                                              progress=progress)
        out.agreement = pd.concat([per_identity_agreement(out.per_query, m) for m in ("ap", "sim")],
                                  ignore_index=True)
    return out


def per_identity_agreement(per_query: pd.DataFrame, metric: str = "ap") -> pd.DataFrame:
    """Mean over identities of the Spearman rho between per-identity method scores (mean of
    ``metric``) and negative true drift, per encoder: a finer "ranks methods like the truth"
    than one rho over method means (ties between encoders are rarer)."""
    rows = []
    if "drift" not in per_query.columns:     # real generated images: no true drift to agree with
        return pd.DataFrame(columns=["encoder", "metric", "mean_rho", "n_identities", "names", "rhos"])
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


def prepare_data(cfg: Profile, root: Path | None = None, progress: bool = False, pipes: dict | None = None):
    """``(split, generated, dataset)`` for notebook 11 (FPR).

    - procedural world (``smoke``/``mini``): build (or reuse) the world, simulate the methods of
      ``cfg.retrieval.methods`` (:func:`~nearid_lib.fpr.methods.simulate_methods`);
    - released data (``paper``): the paper's nine galleries are built from the published sources
      (:func:`~nearid_lib.fpr.downloads.build_paper_galleries`) into ``root`` (default
      ``data_dir(profile)/"fpr"``), one folder per paper dataset key (``leopard``, ...,
      ``cub_sparrow``, ``stanford_cars``), with the user's generated images where they exist and,
      for every method of ``retrieval.generate_methods`` the user's folder lacks, the images of
      the generation step (:func:`~nearid_lib.fpr.generation.generate_fpr`; ``pipes``: ready
      pipelines by method key, else loaded from the hub mirror).
      Names and species are prefixed with the key so galleries never mix (``group_by="species"``
      keeps each query in its gallery). ``split.skipped`` says which per-dataset table cannot be
      produced and why; ``generated`` may be empty."""
    if cfg.world.source == "procedural":
        r = build_world(cfg, root, progress=progress)
        split = load_fpr_split(r / "fpr")
        gen = read_generated(simulate_methods(cfg, r, cfg.retrieval.methods, cfg.retrieval.n_generated_per_id))
        return split, gen, "NearID-mini"
    base = Path(root or data_dir(cfg.name) / "fpr")
    built = build_paper_galleries(cfg, out=base)
    if cfg.retrieval.generate_methods:
        # the generation step: each diffusers method the user's folder lacks (fpr.generation)
        here = generated_root(cfg.name)
        gen_run = generate_fpr(cfg, built.folders, here, user_root=downloads_dir() / GENERATED_DIRNAME,
                               pipes=pipes, progress=progress)
        built = attach_generated(built, downloads_dir() / GENERATED_DIRNAME, here, gen_run.note())
    trains, gals, gens = [], [], []
    for key, f in built.folders.items():
        sp = load_fpr_split(f)
        for t, lst in ((sp.train, trains), (sp.gallery, gals)):
            lst.append(t.assign(name=key + "/" + t.name.astype(str), species=key + "/" + t.species.astype(str),
                                dataset=key))
        if (f / "generated_data.csv").exists():
            g = read_generated(f / "generated_data.csv")
            gens.append(g.assign(name=key + "/" + g.name.astype(str), species=key + "/" + g.species.astype(str),
                                 dataset=key))
    empty = pd.DataFrame(columns=["name", "species", "file_path", "ref_path", "dataset"])
    split = FPRSplit(pd.concat(trains, ignore_index=True) if trains else empty.copy(),
                     pd.concat(gals, ignore_index=True) if gals else empty.copy(), base,
                     skipped={f"11_fpr_{k}": why for k, why in built.reasons().items()})
    gen = pd.concat(gens, ignore_index=True) if gens else empty.assign(method=[])
    return split, gen, "FPR-released"


def ablation_pool_of(split: FPRSplit) -> pd.DataFrame | None:
    """The authors' Re-ID ablation pools of a released split (``<key>/ablation_gallery_data.csv``
    beside the galleries :func:`prepare_data` read, written under ``retrieval.gallery_rule =
    "authors"``), names and species prefixed with the dataset key as :func:`prepare_data` prefixes
    them; None when there is none (the procedural world, our gallery rule)."""
    have = set(split.train["dataset"]) if "dataset" in split.train.columns else set()
    parts = []
    for key in DATASET_KEYS:
        f = Path(split.root) / key / POOL_CSV
        if key in have and f.exists():
            t = resolve_paths(read_fpr_table(f, "gallery"))
            parts.append(t.assign(name=key + "/" + t.name.astype(str), species=key + "/" + t.species.astype(str),
                                  dataset=key))
    return pd.concat(parts, ignore_index=True) if parts else None


def background_removed(cfg: Profile, split: FPRSplit, device=None) -> tuple[tuple | None, str | None, str | None]:
    """FPR Table 14's "removed" inputs: ``((train, gallery) of background-removed copies, the weights
    that made them, None)`` in the released profile (:func:`~.bg_removal.removed_tables`: the copies
    of the step ``make bgremove``, any missing one written here), ``(None, None, why)`` when carvekit
    or its weights are absent, ``(None, None, None)`` in a procedural world (its masks serve)."""
    if cfg.world.source == "procedural" or not len(split.train):
        return None, None, None
    why = weights_reason()
    if why:
        return None, None, why
    dev = str(resolve_device(cfg.device)) if device is None else str(device)
    tables, made_by = removed_tables([split.train, split.gallery], cfg.name, tuple(cfg.retrieval.bg_sizes), dev)
    return (tables[0], tables[1]), made_by, None


def sampling_encoder(models: dict, pool: pd.DataFrame | None) -> str:
    """The encoder Table 2's k-means runs in: the authors' MiewID with their pools (the specialised
    encoder, then the first, when it is not loaded), else the NearID head (ours) or the first."""
    order = ("miewid", "nearid") if pool is not None else ("nearid",)
    return next((e for e in order if e in models), next(iter(models)))


def method_sources(generated: pd.DataFrame) -> pd.DataFrame:
    """Where each method's images of each dataset come from (``paper``: the user's folder, which
    wins, or the generation step), with the number of subjects and images; empty when the table
    has no ``source`` column (the simulated methods of smoke/mini)."""
    if "source" not in generated.columns or generated.empty:
        return pd.DataFrame(columns=["method", "dataset", "source", "subjects", "images"])
    g = generated.assign(dataset=generated.get("dataset", "all"))
    return (g.groupby(["method", "dataset", "source"], sort=True)
             .agg(subjects=("name", "nunique"), images=("file_path", "size")).reset_index())


# tables of notebook 11 that every profile writes, and what each needs
GLOBAL_TABLES = {"11_fpr_oracle": "refs", "11_fpr_bg_removal": "refs", "11_fpr_generated_long": "gen",
                 "11_fpr_drift_agreement": "gen", "11_fpr_generated": "gen", "11_fpr_gallery_ablation": "gen",
                 "11_fpr_gallery_sampling": "gen", "claims_11_retrieval": "gen"}


def skip_reasons(split: FPRSplit, generated: pd.DataFrame, specs: Sequence[EncoderSpec]) -> dict[str, str]:
    """``{table: reason}`` for the notebook's tables that this run cannot produce: the per-dataset
    reasons of a released split (absent downloads, no generated images), and the whole-run tables
    when no gallery, no generated image or no encoder is there (empty for the procedural world,
    which always has all three)."""
    out = dict(split.skipped)
    why = {}
    if not any(s.available for s in specs):
        notes = "; ".join(f"{s.name}: {s.note}" for s in specs)
        why = {"refs": f"no retrieval encoder could be loaded ({notes})"}
        why["gen"] = why["refs"]
    elif len(split.train) == 0:
        why = {"refs": "no FPR gallery could be built: " + "; ".join(sorted(set(split.skipped.values())))}
        why["gen"] = why["refs"]
    elif len(generated) == 0:
        why = {"gen": "no generated images for any gallery: " + " | ".join(dict.fromkeys(split.skipped.values()))}
    out.update({t: why[need] for t, need in GLOBAL_TABLES.items() if need in why})
    return out


def sampling_size(cfg: Profile) -> int:
    """Images per subject of the sampled galleries of Table 2: half of the subject's gallery pool
    (the world's ``gallery_per_id``, or the released galleries' ``retrieval.gallery_per_id``)."""
    pool = cfg.world.gallery_per_id if cfg.world.source == "procedural" else cfg.retrieval.gallery_per_id
    return max(1, pool // 2)
