"""DreamBench++ metric-to-human alignment of a bench encoder (NearID Table 2, Figure 4).

With the profile's DreamBench++ ratings (:func:`dbpp_human`; :func:`dbpp_for_profile` finds them:
``downloads_dir()/"dreambenchpp"`` in the publishers' layout in ``paper``) every rated image is
scored against its subject's reference. DreamBench++ human ratings do not exist offline: with
``cfg.eval.dbpp_standin`` the M-H column is computed against a *procedural oracle*
(:func:`dbpp_standin` over :func:`~nearid_lib.nearid.pairs.grid_pairs`: reference = the unedited
cell, "generated" = every other cell, oracle = 1 - identity_change, "methods" = context-drift
levels, "categories" = the drifting factor). Such values are never called human: every table says
:data:`PROCEDURAL_NOTE`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from .. import metrics
from ..stats import grouped_pearson_columns
from ..data.eval_datasets import DBPP_DIRNAME, DOWNLOAD_STEPS, DreamBenchPP, human_rating_rows, load_dreambenchpp
from ..data.schema import DataError
from ..claims.evidence import Evidence
from ..features import file_refs
from ..judge import score_pairs_sharded
from ..paths import downloads_dir

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["PROCEDURAL_NOTE", "dbpp_standin", "graded_evidence", "dbpp_human", "dbpp_root",
           "dbpp_for_profile", "dbpp_mh_from_scores", "HEADLINE_CATEGORY"]

PROCEDURAL_NOTE = "procedural oracle, not human (DreamBench++ stand-in from the world's edit grids)"


def dbpp_standin(benc, data: NearIDData, gp: pd.DataFrame, variant: str = "full"):
    """M-H of ``benc`` against the procedural oracle of :func:`grid_pairs` (NOT human ratings)."""
    if not len(gp):
        return None, np.zeros(0)
    s = benc.grid_scores(data, gp, variant)
    mh = metrics.metric_to_human(s, gp["oracle"].to_numpy(float), gp["method"].to_numpy(),
                                 gp["category"].to_numpy())
    mh["kind"] = "procedural"
    return mh, s


def graded_evidence(prefix: str, pairs: pd.DataFrame, scores: Sequence[tuple[int | None, np.ndarray]]) -> dict[str, Evidence]:
    """Claims evidence of one model's metric-to-human alignment on the procedural DreamBench++
    stand-in: ``pairs`` are :func:`~nearid_lib.nearid.pairs.grid_pairs` rows (``anchor_id``,
    ``oracle``, ``method``), ``scores`` one ``(training seed or None, scores in pairs' order)`` per
    seed. Key ``<prefix>.dbpp_proc.mh``: the Fisher-z mean over methods of each method's Pearson r
    (the ``m_h`` of :func:`~nearid_lib.metrics.metric_to_human`), units = grid anchors, so an
    interval resamples anchors (and seeds)."""
    methods = sorted(pairs["method"].unique())
    group = pairs["method"].map({m: i for i, m in enumerate(methods)}).to_numpy()
    oracle = pairs["oracle"].to_numpy(float)
    tables = []
    for seed, s in scores:
        s = np.asarray(s, dtype=float)
        if s.shape != oracle.shape:
            raise ValueError(f"graded_evidence {prefix!r}: {s.shape[0]} scores for {len(pairs)} pairs")
        cols: dict[str, Any] = {"unit": pairs["anchor_id"].astype(str).to_numpy()}
        for (xc, yc), i in zip(grouped_pearson_columns(len(methods)), range(len(methods))):
            cols[xc] = np.where(group == i, s, np.nan)
            cols[yc] = np.where(group == i, oracle, np.nan)
        t = pd.DataFrame(cols)
        tables.append(t if seed is None else t.assign(seed=int(seed)))
    return {f"{prefix}.dbpp_proc.mh": Evidence(f"pearson_groups:{len(methods)}", pd.concat(tables, ignore_index=True),
                                               f"{prefix} M-H (procedural DB++ stand-in)")}


def _load_rgb(p):
    with Image.open(p) as im:
        return im.convert("RGB")


def _pair_scores(benc, a: list, b: list) -> np.ndarray:
    """Cosine (or the scorer's pair score) of reference ``a[i]`` with generated ``b[i]``.

    A pair scorer (the judge) sees each distinct (reference, generated image) pair once, however many
    rater groups rated the image, through the judge's sharded, resumable path (its answers folder:
    a killed run resumes, notebook 04 reads what ``make judge`` answered); only the images of a
    batch are decoded."""
    if benc.kind == "pairs":
        uniq = list(dict.fromkeys(zip(a, b)))

        def load(idx):
            return [_load_rgb(uniq[i][0]) for i in idx], [_load_rgb(uniq[i][1]) for i in idx]

        res = score_pairs_sharded(benc.scorer, [f"dbpp|{x}|{y}" for x, y in uniq], load,
                                  answers_dir=getattr(benc, "answers_dir", None), workers=getattr(benc, "workers", None))
        sc = np.asarray(getattr(res, "scores", res), dtype=np.float64)
        cov = getattr(benc, "coverage", None)
        if cov is not None:          # what the judge step records against the ledger
            c = cov.setdefault("dbpp_human:full", {"n": 0, "n_covered": 0, "status": {}})
            c["n"] += len(uniq)
            c["n_covered"] += int(np.isfinite(sc).sum())
        by_pair = dict(zip(uniq, sc))
        return np.array([by_pair[(x, y)] for x, y in zip(a, b)], dtype=np.float64)
    uniq = list(dict.fromkeys(a + b))
    rows = benc.embedder.embed_refs(file_refs(uniq), "full", batch_size=32, desc="DreamBench++ images")
    e = dict(zip(uniq, rows))
    return np.array([float(np.dot(e[x], e[y])) for x, y in zip(a, b)])


def dbpp_human(dbpp: DreamBenchPP, max_rows: int | None = None) -> Callable[[Any], tuple]:
    """M-H against DreamBench++ *human* ratings (``nearid_lib.data.eval_datasets.load_dreambenchpp``):
    per rated image, s(reference image of its subject, generated image); returns a callable for
    :func:`~nearid_lib.nearid.evaluate.evaluate_encoder` ``(benc) -> (M-H dict with kind="human",
    scores)``.

    As the NearID authors report it (their reproduction guide and ``pearson.py``;
    :func:`nearid_lib.metrics.metric_to_human_groups`): per category and method, the Pearson r
    against each of the two human rater groups separately, averaged (``r_spread`` = half their
    difference); per category the Fisher-z mean over the methods. ``m_h`` (Table 1's DB++ column,
    Tables 3, 8, 9, 10) is the ``object`` category's value (585 of the 1,350 prompts), ``m_h_all4``
    the Fisher-z mean of the four category values; ``per_method`` (Table 2) the object category's
    rows; ``per_category`` (Figure 4) one row per category; ``long`` every row. The categories are
    never pooled into one r. ``scores`` are in the row order of the human ratings."""
    hum = human_rating_rows(dbpp, max_rows)

    def run(benc):
        s = _pair_scores(benc, hum["reference"].tolist(), hum["image"].tolist())
        return dbpp_mh_from_scores(s, hum), s

    return run


HEADLINE_CATEGORY = "object"
_CATEGORY_IDS = {"animal": "live_subject_animal", "human": "live_subject_human", "object": "object", "style": "style"}


def dbpp_mh_from_scores(s: np.ndarray, hum: pd.DataFrame) -> dict:
    """The M-H dict of :func:`dbpp_human` from per-row metric scores ``s`` over the human rating
    rows ``hum`` (columns ``group``, ``method``, ``subject``, ``prompt_index``, ``category``,
    ``score``: one row per group and rated image)."""
    groups = sorted(hum["group"].unique())
    keys = ["method", "subject", "prompt_index"]
    by = [hum[hum["group"] == g].assign(_s=s[(hum["group"] == g).to_numpy()]).set_index(keys) for g in groups]
    common = by[0].index
    for b in by[1:]:
        common = common.intersection(b.index)
    base = by[0].loc[common]
    cat = base["category"].map(lambda c: _CATEGORY_IDS.get(c, c) if c else "all").to_numpy()
    long = metrics.metric_to_human_groups(base["_s"].to_numpy(float), [b.loc[common, "score"].to_numpy(float)
                                                                       for b in by],
                                          base.index.get_level_values("method").to_numpy(), cat)
    f = long[long["method"] == "fisher_z"].set_index("category")
    head = HEADLINE_CATEGORY if HEADLINE_CATEGORY in f.index else f.index[0]
    pm = long[(long["category"] == head) & (long["method"] != "fisher_z")][["method", "r", "r_spread", "n"]]
    pc = f.drop(index="all4", errors="ignore").reset_index()[["category", "r", "r_spread", "n"]]
    return {"m_h": float(f.at[head, "r"]), "m_h_sem": float(f.at[head, "r_spread"]), "m_h_category": head,
            "m_h_all4": float(f.at["all4", "r"]) if "all4" in f.index else float("nan"),
            "per_method": pm.reset_index(drop=True), "per_category": pc.rename(columns={"r_spread": "sem"}),
            "long": long, "groups": groups, "kind": "human"}


def dbpp_root(cfg: Profile) -> Path | None:
    """Where the profile reads DreamBench++: ``eval.dbpp_root`` when set, else
    ``downloads_dir()/"dreambenchpp"`` when ``eval.dbpp_human`` (paper), else None (no human
    ratings in this profile)."""
    if cfg.eval.dbpp_root:
        return Path(cfg.eval.dbpp_root).expanduser()
    if cfg.eval.dbpp_human:
        return downloads_dir() / DBPP_DIRNAME
    return None


def dbpp_for_profile(cfg: Profile, max_rows: int | None = None) -> tuple[Callable[[Any], tuple] | None, str | None]:
    """``(scorer, None)`` -- the :func:`dbpp_human` callable for ``evaluate_encoder(dbpp=...)`` --
    when the profile's DreamBench++ data is present and valid, else ``(None, reason)`` with the
    reason to state beside the empty DreamBench++ columns (no ratings in this profile, folder
    absent with the download steps, or the loader's error naming file/key/field)."""
    root = dbpp_root(cfg)
    if root is None:
        why = ("this profile has no DreamBench++ human ratings"
               + (" (the procedural stand-in is labelled apart)" if cfg.eval.dbpp_standin else ""))
        return None, why
    if not root.is_dir():
        return None, (f"DreamBench++ not found at {root}: download it by hand (docs/paper-profile.md): "
                      f"{DOWNLOAD_STEPS}")
    try:
        db = load_dreambenchpp(root)
    except DataError as err:
        return None, f"DreamBench++ at {root} cannot be read: {err}"
    return dbpp_human(db, max_rows=max_rows), None
