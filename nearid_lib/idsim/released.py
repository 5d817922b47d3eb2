"""ID-Sim in the ``paper`` profile: the released checkpoint and the public benchmarks (paper 001).

ID-Sim's curated training set (real instance pairs + generative edits, App. A) is not public, so the
``paper`` profile trains nothing (``idsim.source = "released"``); notebook 09 scores what can be
scored on public data and states, per table, why the rest is not produced.

What the authors publish (read from their package, ``JuliaChae/id_sim``, June 2026):

* Checkpoint: hub model repos ``chaenayo/id-sim_<backbone>_cls_patch`` (``dinov3_vitl16`` default;
  ``dinov3_vitb16``, ``dinov2_vitl14``, ``dinov2_vitb14``) holding :data:`RELEASED_FILES`:
  ``adapter_config.json`` + ``adapter_model.safetensors`` (a PEFT LoRA over their whole
  ``PerceptualModel``), ``mlp_cls.pth`` / ``mlp_patch.pth`` (state dicts of two residual heads
  ``LayerNorm -> Linear(D, 512) -> SiLU -> Linear(512, D)`` plus ``sigmoid(beta_logit) * input``).
  The backbone is Meta's *native* DINOv3 code loaded through ``torch.hub`` (``facebookresearch/dinov3``)
  with the gated weights ``dinov3_vitl16_pretrain_lvd1689m-8aa4cbdd.pth`` (not redistributed);
  features = output of block 23 at 448 px, register tokens dropped, embeddings mean-centred and
  L2-normalised, distance = 1 - cosine of the CLS embeddings (+ pooled-patch cosine in "joint").
* Benchmarks: Subjects2k (new, hub dataset ``chaenayo/Subjects2k``: ``reference_image``,
  ``test_image``, ``pair_id``, ``human_votes``, ``human_agreement``, ``binary_label``,
  ``num_human_votes``, ``gpt_score``) and DreamBench++ (its own release,
  :func:`nearid_lib.data.benchmarks.load_dreambenchpp`). PODS, DeepFashion2, AerialCattle2017,
  PetFace and CUTE are public datasets, but the evaluation subsets ID-Sim drew from them (PetFace's
  3,250 pairs, CUTE's 1,800 triplets, AerialCattle's 2,329 filtered images, the DeepFashion2 query /
  gallery lists) are not published: :data:`UNPUBLISHED_BENCHMARKS`.
* The selective-sensitivity edit grids (App. F) are not published ("coming soon" in the authors'
  README): :data:`SENSITIVITY_REASON`.

What notebook 09 produces from public data (:func:`score_released`): Figure 25's Subjects2k and
DreamBench++ columns for the frozen rows (``idsim.frozen_rows``) and the NearID head; Table 2a's
embedding rows, its ``MLLM*`` row from the datasets' own GPT-4o annotations (Subjects2k
``gpt_score``, DreamBench++ ``data_gpt_rating``) and an open MLLM judge row; Table 2b's frozen
DINOv3 patch column on S2k / DB++.

The released ID-Sim rows are not produced here (:func:`released_idsim_reason`): the LoRA keys of
``adapter_model.safetensors`` address modules of the native torch.hub DINOv3 model inside the
package's ``ViTExtractor`` (``feature_extraction/extractor.py``), code that is neither on PyPI nor
readable from here; mapping those keys onto the ``transformers`` DINOv3 (separate q/k/v, other
module names) would be a guess, and a guessed format is not a reproduction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
import torch

from .. import hub
from .. import metrics as M
from ..data.schema import DataError

if TYPE_CHECKING:
    from ..config import Profile

from ..data.benchmarks import DreamBenchPP

__all__ = ["RELEASED_FILES", "DINOV3_NATIVE_WEIGHTS", "SUBJECTS2K_COLUMNS", "UNPUBLISHED_BENCHMARKS",
           "SENSITIVITY_REASON", "PAPER_MODEL_KEYS", "released_idsim_reason", "load_subjects2k",
           "pair_scores", "subjects2k_metrics", "subjects2k_gpt_metrics", "dbpp_metrics", "dbpp_gpt_metrics",
           "judge_pairs", "judge_metrics", "load_frozen_row", "load_frozen_rows", "ReleasedScores",
           "load_benchmarks", "score_released", "released_table", "released_mllm_table", "released_patch_table",
           "not_scored", "world_only_tables"]

RELEASED_FILES = ("adapter_config.json", "adapter_model.safetensors", "mlp_cls.pth", "mlp_patch.pth")
DINOV3_NATIVE_WEIGHTS = "dinov3_vitl16_pretrain_lvd1689m-8aa4cbdd.pth"
SUBJECTS2K_COLUMNS = ("reference_image", "test_image", "pair_id", "human_votes", "human_agreement",
                      "binary_label", "num_human_votes", "gpt_score")

# benchmark -> why ID-Sim's evaluation set cannot be rebuilt from public files
UNPUBLISHED_BENCHMARKS = {
    "PODS": "PODS images are public, but ID-Sim's query/gallery protocol files and the PerSAM masks are not "
            "released with the checkpoint",
    "DeepFashion2": "ID-Sim's 1,668-query / 3,065-gallery retrieval subset of DeepFashion2 is not published",
    "AerialCattle": "ID-Sim's 2,329 filtered AerialCattle2017 images (23 queries) are not published",
    "PetFace": "ID-Sim's 3,250 PetFace verification pairs are not published",
    "CUTE": "ID-Sim's 1,800 CUTE easy/hard triplets are not published",
}
SENSITIVITY_REASON = ("ID-Sim's selective-sensitivity data (the per-instance edit grids of App. F: identity x "
                      "background / viewpoint / lighting) is not published (JuliaChae/id_sim lists the "
                      "sensitivity analysis tools as 'coming soon'), and the paper profile has no world grids")

# registry name -> the model key of paper_values/idsim_fig25_full_results (None: no paper row)
PAPER_MODEL_KEYS = {"dinov3-vitl16": "DINOv3", "clip-vit-l14": "CLIP"}

# our metric ids of the public benchmarks (nearid_lib.idsim.bench.BENCH_INFO keys)
_DATA = {"subjects2k_ap": "Subjects2k (chaenayo/Subjects2k), binary_label", 
         "subjects2k_auc": "Subjects2k (chaenayo/Subjects2k), binary_label",
         "dreambench_spearman": "DreamBench++ generated images, mean human concept-preservation score",
         "dreambench_kendall": "DreamBench++ generated images, mean human concept-preservation score"}


def released_idsim_reason(repo_id: str) -> str:
    """Why the released ID-Sim rows are not in the tables (always a reason: see the module
    docstring), saying whether ``repo_id`` is in the hub mirror / reachable."""
    where = ("present in the hub mirror" if hub.hub_dir() is not None and hub.is_available(repo_id)
             else "not in the hub mirror" if hub.hub_dir() is not None else "on the hub")
    return (f"released ID-Sim checkpoint {repo_id} ({where}; files {', '.join(RELEASED_FILES)}) not scored: "
            f"its PEFT LoRA keys address Meta's native torch.hub DINOv3 modules inside id_sim's ViTExtractor "
            f"(gated backbone weights {DINOV3_NATIVE_WEIGHTS}), code that is not on PyPI and could not be read "
            f"here; loading it through another DINOv3 implementation would mean guessing the key layout")


# ----------------------------------------------------------------------------- Subjects2k
def load_subjects2k(repo_id: str = "chaenayo/Subjects2k", max_pairs: int | None = None):
    """The Subjects2k benchmark (hub dataset ``repo_id`` through :func:`nearid_lib.hub.load_hub_dataset`,
    i.e. the mirror when ``NEARID_HUB_DIR`` is set) as one ``datasets.Dataset``: the ``test`` split
    if there is one, else the only split. Checks the released columns (:data:`SUBJECTS2K_COLUMNS`)
    and that ``binary_label`` is 0/1 and ``human_agreement`` in [0, 1], naming the row's ``pair_id``."""
    dd = hub.load_hub_dataset(repo_id)
    splits = list(dd)
    split = "test" if "test" in splits else (splits[0] if len(splits) == 1 else None)
    if split is None:
        raise DataError(f"dataset {repo_id}: several splits {splits} and none named 'test'")
    ds = dd[split]
    miss = [c for c in SUBJECTS2K_COLUMNS if c not in ds.column_names]
    if miss:
        raise DataError(f"dataset {repo_id} split {split!r}: missing field(s) {miss}; has {ds.column_names}")
    if max_pairs is not None:
        ds = ds.select(range(min(int(max_pairs), len(ds))))
    lab = ds["binary_label"]
    agr = ds["human_agreement"]
    ids = ds["pair_id"]
    for i, (y, c) in enumerate(zip(lab, agr)):
        if y not in (0, 1):
            raise DataError(f"dataset {repo_id} split {split!r}, row {i} (pair_id {ids[i]!r}), field "
                            f"'binary_label': {y!r} is not 0 or 1")
        if c is None or not 0.0 <= float(c) <= 1.0:
            raise DataError(f"dataset {repo_id} split {split!r}, row {i} (pair_id {ids[i]!r}), field "
                            f"'human_agreement': {c!r} is not in [0, 1]")
    return ds


def _pair_embed(encoder, images: Sequence[Any], kind: str, batch_size: int) -> torch.Tensor:
    """L2-normalised ``kind`` embeddings: ``"pooled"`` (the encoder's own: CLS / MAP head / GAP) or
    ``"patch"`` (mean of the L2-normalised patch tokens, the aggregated patch embedding of Table 2b)."""
    if kind == "pooled":
        return encoder.embed(list(images), batch_size=batch_size)
    if kind == "patch":
        tok = encoder.encode(list(images), batch_size=batch_size).tokens      # [B, N, D]
        if tok is None:
            raise ValueError(f"encoder {encoder.name}: no patch tokens for a patch embedding")
        return torch.nn.functional.normalize(torch.nn.functional.normalize(tok, dim=-1).mean(1), dim=-1)
    raise ValueError(f"pair_scores: kind must be 'pooled' or 'patch', got {kind!r}")


def pair_scores(encoder, first: Sequence[Any], second: Sequence[Any], batch_size: int = 16,
                kind: str = "pooled") -> np.ndarray:
    """Cosine similarity of the ``kind`` embeddings (:func:`_pair_embed`) of ``first[i]`` and
    ``second[i]`` (PIL images or paths), in batches of ``batch_size`` pairs."""
    if len(first) != len(second):
        raise ValueError(f"pair_scores: {len(first)} first images vs {len(second)} second images")
    out = []
    with torch.no_grad():
        for i in range(0, len(first), batch_size):
            a = _pair_embed(encoder, first[i:i + batch_size], kind, batch_size)
            b = _pair_embed(encoder, second[i:i + batch_size], kind, batch_size)
            out.append((a * b).sum(-1).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _binary_metrics(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    y = np.asarray(labels, dtype=int)
    if not len(scores) or not 0 < y.sum() < len(y):
        return {}
    return {"subjects2k_ap": M.verification_ap(scores, y), "subjects2k_auc": M.verification_auc(scores, y)}


def subjects2k_metrics(encoder, ds, batch_size: int = 16, kind: str = "pooled"
                       ) -> tuple[dict[str, float], np.ndarray]:
    """``({subjects2k_ap, subjects2k_auc, n_pairs}, scores)``: AP (the paper's main metric) and
    ROC-AUC of the reference-test cosine against the released ``binary_label`` (both metrics absent
    when the pairs hold one class only); images streamed in batches."""
    scores = []
    for i in range(0, len(ds), batch_size):
        rows = ds[i:i + batch_size]
        scores.append(pair_scores(encoder, rows["reference_image"], rows["test_image"], batch_size, kind))
    s = np.concatenate(scores) if scores else np.zeros(0)
    return {"n_pairs": int(len(s)), **_binary_metrics(s, np.asarray(ds["binary_label"]))}, s


def subjects2k_gpt_metrics(ds) -> dict[str, float]:
    """Table 2a's MLLM* row on Subjects2k: the released ``gpt_score`` (Subjects200K's own GPT-4o
    identity-preservation score, 0-5) ranked against ``binary_label``."""
    s = np.asarray(ds["gpt_score"], dtype=float)
    return {"n_pairs": int(len(s)), **_binary_metrics(s, np.asarray(ds["binary_label"]))}


def _rank_metrics(scores: np.ndarray, ratings: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(scores) & np.isfinite(ratings)
    if ok.sum() < 3:
        return {}
    rc = M.rank_correlations(scores[ok], ratings[ok])
    return {"dreambench_spearman": rc["spearman"], "dreambench_kendall": rc["kendall"]}


def dbpp_metrics(encoder, pairs: pd.DataFrame, batch_size: int = 16, kind: str = "pooled"
                 ) -> tuple[dict[str, float], np.ndarray]:
    """``({dreambench_spearman, dreambench_kendall, n_pairs, n_subjects}, scores)`` over
    :func:`nearid_lib.nearid.dbpp.dbpp_mean_ratings` rows: rank correlations of the reference-image
    cosine with the mean human rating (absent under 3 pairs)."""
    s = pair_scores(encoder, pairs["reference"].tolist(), pairs["image"].tolist(), batch_size, kind)
    res = {"n_pairs": int(len(s)), "n_subjects": int(pairs["subject"].nunique())}
    return {**res, **_rank_metrics(s, pairs["rating"].to_numpy(dtype=float))}, s


def dbpp_gpt_metrics(db: DreamBenchPP, pairs: pd.DataFrame) -> dict[str, float]:
    """Table 2a's MLLM* row on DreamBench++: the release's own GPT-4o concept-preservation ratings
    (``data_gpt_rating/concept_preservation_full``) against the mean human rating, on the pairs of
    ``pairs`` that GPT rated (``n_pairs``; no metric when fewer than 3)."""
    gpt = db.ratings[db.ratings["rater"] == "gpt"]
    g = gpt.groupby(["method", "subject", "prompt_index"])["score"].mean()
    key = pd.MultiIndex.from_frame(pairs[["method", "subject", "prompt_index"]])
    s = g.reindex(key).to_numpy(dtype=float)
    ok = np.isfinite(s)
    res = {"n_pairs": int(ok.sum())}
    return {**res, **_rank_metrics(s[ok], pairs["rating"].to_numpy(dtype=float)[ok])}


def judge_pairs(judge, first: Sequence[Any], second: Sequence[Any], batch_size: int = 16
                ) -> tuple[np.ndarray, pd.DataFrame]:
    """An MLLM judge's 0-1 identity similarity of each pair (NaN where its answer cannot be read),
    and the per-pair answers (``similarity``, ``status``, ``answer``)."""
    from ..imageio import load_images

    scores, status, raw = [], [], []
    for i in range(0, len(first), batch_size):
        res = judge.score_pairs(load_images(list(first[i:i + batch_size])),
                                load_images(list(second[i:i + batch_size])))
        scores += list(res.scores)
        status += list(res.status)
        raw += list(res.raw)
    return np.asarray(scores, dtype=float), pd.DataFrame({"similarity": scores, "status": status, "answer": raw})


def judge_metrics(judge, s2k=None, dbpp_pairs: pd.DataFrame | None = None, max_pairs: int | None = None,
                  batch_size: int = 16) -> tuple[dict[str, float], pd.DataFrame]:
    """Table 2a's open-judge row: the judge on the first ``max_pairs`` pairs of Subjects2k and of
    the DreamBench++ mean-rating pairs; metrics on the pairs it answered (``coverage`` = answered
    share over both benchmarks). Returns the metrics and the per-pair answers."""
    res: dict[str, float] = {}
    answers = []
    n = lambda k: k if max_pairs is None else min(int(max_pairs), k)     # noqa: E731
    if s2k is not None and len(s2k):
        sub = s2k.select(range(n(len(s2k))))
        s, per = judge_pairs(judge, sub["reference_image"], sub["test_image"], batch_size)
        ok = np.isfinite(s)
        res.update(_binary_metrics(s[ok], np.asarray(sub["binary_label"])[ok]))
        res["n_subjects2k"] = int(len(sub))
        answers.append(per.assign(benchmark="Subjects2k", pair=list(sub["pair_id"])))
    if dbpp_pairs is not None and len(dbpp_pairs):
        sub = dbpp_pairs.iloc[:n(len(dbpp_pairs))]
        s, per = judge_pairs(judge, sub["reference"].tolist(), sub["image"].tolist(), batch_size)
        res.update(_rank_metrics(s, sub["rating"].to_numpy(dtype=float)))
        res["n_dreambench"] = int(len(sub))
        answers.append(per.assign(benchmark="DreamBench++", pair=sub["image"].tolist()))
    per = pd.concat(answers, ignore_index=True) if answers else pd.DataFrame()
    res["n_pairs"] = int(len(per))
    res["coverage"] = float(np.isfinite(per["similarity"].to_numpy(float)).mean()) if len(per) else float("nan")
    return res, per


# ----------------------------------------------------------------------------- frozen rows
def load_frozen_row(cfg: Profile, name: str, device=None):
    """One of ``cfg.idsim.frozen_rows`` through the encoder registry (weights through
    :mod:`nearid_lib.hub`; DINO rows at ``idsim.image_size``, the others at their native size)."""
    from ..models import load_encoder, resolve_device

    kw = {"image_size": cfg.idsim.image_size} if cfg.idsim.image_size and name.startswith("dino") else {}
    return load_encoder(name, device=resolve_device(cfg.device) if device is None else device, **kw)[0]


def load_frozen_rows(cfg: Profile) -> tuple[dict[str, Any], dict[str, str]]:
    """``(encoders, skipped)``: each of ``cfg.idsim.frozen_rows`` loaded (:func:`load_frozen_row`),
    or its reason (not in the mirror with the download command, or the load error)."""
    encs, skipped = {}, {}
    for name in cfg.idsim.frozen_rows:
        try:
            encs[name] = load_frozen_row(cfg, name)
        except (OSError, ValueError, KeyError) as err:     # HubError is an OSError
            skipped[name] = f"frozen row {name} not loaded: {err}"
    return encs, skipped


@dataclass
class ReleasedScores:
    """Everything notebook 09 scores on the public ID-Sim benchmarks in the ``released`` source.

    ``results``: scorer -> {metric_id: value, n_pairs...} for pooled embeddings (frozen rows by
    registry name, ``nearid``); ``patch``: the frozen ID-Sim backbone's aggregated patch embedding
    (Table 2b's DINOv3 column); ``gpt``: the datasets' own GPT-4o annotations (Table 2a MLLM*);
    ``judge``: the open MLLM judge (``idsim.mllm_judge``) and its per-pair ``answers``;
    ``missing``: benchmark or scorer -> why it is absent."""

    results: dict[str, dict[str, float]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    patch: dict[str, float] | None = None
    patch_label: str = ""
    gpt: dict[str, float] = field(default_factory=dict)
    judge: dict[str, float] | None = None
    judge_label: str = ""
    answers: pd.DataFrame | None = None
    missing: dict[str, str] = field(default_factory=dict)
    n_s2k: int = 0
    n_dbpp: int = 0
    n_dbpp_subjects: int = 0

    @property
    def any_benchmark(self) -> bool:
        return bool(self.n_s2k or self.n_dbpp)


def load_benchmarks(cfg: Profile) -> tuple[Any, DreamBenchPP | None, pd.DataFrame | None, dict[str, str]]:
    """``(subjects2k, dreambenchpp, dbpp_pairs, missing)``: Subjects2k from the hub resolver
    (``idsim.subjects2k_repo``), DreamBench++ from ``eval.dbpp_root`` or
    ``downloads_dir()/"dreambenchpp"`` in its publishers' layout with its mean-rating pairs; a
    benchmark that cannot be read is None with its reason in ``missing``. At most
    ``idsim.max_pairs`` pairs of each."""
    from ..data.benchmarks import load_dreambenchpp
    from ..nearid.dbpp import DBPP_DIRNAME, DOWNLOAD_STEPS, dbpp_mean_ratings
    from ..paths import downloads_dir

    missing: dict[str, str] = {}
    try:
        s2k = load_subjects2k(cfg.idsim.subjects2k_repo, max_pairs=cfg.idsim.max_pairs)
    except (OSError, DataError, ValueError) as err:      # HubError is an OSError
        s2k = None
        missing["Subjects2k"] = f"Subjects2k ({cfg.idsim.subjects2k_repo}) not read: {err}"
    root = Path(cfg.eval.dbpp_root).expanduser() if cfg.eval.dbpp_root else downloads_dir() / DBPP_DIRNAME
    db = pairs = None
    if not root.is_dir():
        missing["DreamBench++"] = f"DreamBench++ not found at {root}: download it by hand: {DOWNLOAD_STEPS}"
    else:
        try:
            db = load_dreambenchpp(root)
            pairs = dbpp_mean_ratings(db, max_rows=cfg.idsim.max_pairs)
        except DataError as err:
            missing["DreamBench++"] = f"DreamBench++ at {root} cannot be read: {err}"
            db = None
    return s2k, db, pairs, missing


def score_released(cfg: Profile, nearid=None, log=print) -> ReleasedScores:
    """Score every public ID-Sim benchmark (:func:`load_benchmarks`) with every scorer that can be
    had without ID-Sim's unpublished training set: the frozen rows (``idsim.frozen_rows``, one
    loaded at a time), the NearID head ``nearid`` (notebook 03's, when given), the datasets' own
    GPT-4o annotations, and the open MLLM judge ``idsim.mllm_judge`` (on at most
    ``idsim.mllm_max_pairs`` pairs per benchmark)."""
    from ..models import resolve_device, resolve_name

    bs = cfg.idsim.eval_batch_size
    s2k, db, pairs, missing = load_benchmarks(cfg)
    out = ReleasedScores(missing=dict(missing), n_s2k=len(s2k) if s2k is not None else 0,
                         n_dbpp=len(pairs) if pairs is not None else 0,
                         n_dbpp_subjects=int(pairs["subject"].nunique()) if pairs is not None else 0)
    if not out.any_benchmark:
        return out
    backbone = resolve_name(cfg.idsim.backbone)

    def score(name, enc, kind="pooled"):
        res = {}
        if s2k is not None:
            res.update(subjects2k_metrics(enc, s2k, bs, kind)[0])
        if pairs is not None:
            m = dbpp_metrics(enc, pairs, bs, kind)[0]
            res.update({k: v for k, v in m.items() if k.startswith("dreambench")})
        return {k: v for k, v in res.items() if k in _DATA}

    for name in cfg.idsim.frozen_rows:
        try:
            enc = load_frozen_row(cfg, name)
        except (OSError, ValueError, KeyError) as err:     # HubError is an OSError
            out.missing[name] = f"frozen row {name} not loaded: {err}"
            log(out.missing[name])
            continue
        out.results[name] = score(name, enc)
        out.labels[name] = f"{name} pooled embedding (frozen; {enc.weights}, {enc.preprocess.image_size} px)"
        if resolve_name(name) == backbone:
            out.patch = score(name, enc, "patch")
            out.patch_label = f"{name} mean of L2-normalised patch tokens (frozen; {enc.weights})"
        del enc
    if nearid is not None:
        nearid = nearid.to(resolve_device(cfg.device))
        out.results["nearid"] = score("nearid", nearid)
        out.labels["nearid"] = f"NearID MAP head ({nearid.weights})"
    else:
        out.missing["nearid"] = "NearID head absent (notebook 03's checkpoint): no NearID row"
    if s2k is not None:
        out.gpt.update({k: v for k, v in subjects2k_gpt_metrics(s2k).items() if k in _DATA})
    if db is not None:
        g = dbpp_gpt_metrics(db, pairs)
        out.gpt.update({k: v for k, v in g.items() if k in _DATA})
        if g["n_pairs"] < 3:
            out.missing["gpt_dreambench"] = ("DreamBench++ GPT-4o ratings (data_gpt_rating/concept_preservation_full) "
                                             f"cover {g['n_pairs']} of the rated pairs: no MLLM* DreamBench++ value")
    if cfg.idsim.mllm_judge:
        try:
            from .mllm import idsim_judge
            judge = idsim_judge(cfg.idsim.mllm_judge, device=str(resolve_device(cfg.device)),
                                max_new_tokens=cfg.idsim.mllm_max_new_tokens)
        except (OSError, ValueError) as err:
            out.missing["judge"] = f"MLLM judge {cfg.idsim.mllm_judge} not loaded: {err}"
        else:
            out.judge, out.answers = judge_metrics(judge, s2k, pairs, cfg.idsim.mllm_max_pairs,
                                                   batch_size=max(1, min(bs, 4)))
            out.judge_label = (f"MLLM judge {judge.name}, identity prompt (coverage {out.judge['coverage']:.0%} "
                               f"of {out.judge['n_pairs']} pairs)")
    else:
        out.missing["judge"] = "idsim.mllm_judge is None: no open MLLM judge row"
    return out


def _data_note(mid: str, sc: ReleasedScores) -> tuple[str, int]:
    if mid.startswith("subjects2k"):
        return _DATA[mid], sc.n_s2k
    return f"{_DATA[mid]} ({sc.n_dbpp_subjects} subjects)", sc.n_dbpp


def released_table(sc: ReleasedScores, profile: str) -> pd.DataFrame:
    """Long table beside ``paper_values/idsim_fig25_full_results`` (keys model, metric_id): one row
    per (scorer, public metric) with ``data`` (what was scored) and ``n`` (pairs scored). Frozen
    rows with a paper counterpart take its model key (:data:`PAPER_MODEL_KEYS`)."""
    from .bench import BENCH_INFO

    rows = []
    for enc, res in sc.results.items():
        for mid, v in res.items():
            bench, metric, _ = BENCH_INFO[mid]
            data, n = _data_note(mid, sc)
            rows.append({"model": PAPER_MODEL_KEYS.get(enc, "NearID head" if enc == "nearid" else enc),
                         "metric_id": mid, "benchmark": bench, "metric": metric, "value": float(v),
                         "ours_label": sc.labels[enc], "data": data, "n": n, "profile": profile})
    return pd.DataFrame(rows)


def released_mllm_table(sc: ReleasedScores, profile: str) -> pd.DataFrame:
    """ID-Sim Table 2a from public data: the embedding rows, ``MLLM* (GPT-4o)`` = the datasets' own
    GPT-4o annotations (Subjects2k ``gpt_score``, DreamBench++ GPT ratings) and the open judge; a
    NaN cell says why in ``note``."""
    from .mllm import mllm_table

    results = {k: {**v, "n_pairs": None} for k, v in sc.results.items()}
    labels = {k: ("", sc.labels[k]) for k in sc.results}
    notes = {k: "" for k in sc.results}
    if sc.gpt:
        results["gpt_annotations"] = {**sc.gpt, "n_pairs": None}
        labels["gpt_annotations"] = ("MLLM* (GPT-4o)", "the datasets' own GPT-4o annotations: Subjects2k gpt_score "
                                     "(0-5), DreamBench++ data_gpt_rating/concept_preservation_full (0-4)")
        notes["gpt_annotations"] = sc.missing.get("gpt_dreambench", "")
    if sc.judge is not None:
        results["judge"] = sc.judge
        labels["judge"] = ("", sc.judge_label)
        notes["judge"] = "a metric is NaN where the judge answered too few pairs to define it"
    t = mllm_table(results, labels, profile)
    counts = {"subjects2k_ap": sc.n_s2k, "dreambench_spearman": sc.n_dbpp}
    for col, n in counts.items():
        if not n:
            notes = {k: (v + "; " if v else "") + sc.missing.get(_BENCH_OF[col], "") for k, v in notes.items()}
    # pairs each row was scored on (the judge: its first idsim.mllm_max_pairs of each benchmark)
    judged = sc.judge or {}
    t["n_subjects2k"] = [int(judged.get("n_subjects2k", 0)) if k == "judge" else sc.n_s2k for k in t.scorer]
    t["n_dreambench"] = [int(judged.get("n_dreambench", 0)) if k == "judge" else sc.n_dbpp for k in t.scorer]
    t["n_pairs"] = t["n_subjects2k"] + t["n_dreambench"]
    t["note"] = [notes[k] for k in t.scorer]
    return t


def released_patch_table(sc: ReleasedScores, profile: str) -> pd.DataFrame | None:
    """ID-Sim Table 2b's ``dinov3`` column on the public benchmarks (S2k AP, DB++ Spearman): the
    frozen backbone's aggregated patch embedding; ``ours_no_patch`` / ``ours`` need trained ID-Sim
    models (not produced, :func:`released_idsim_reason`). None when the backbone was not scored."""
    if not sc.patch:
        return None
    rows = []
    for ds, metric, mid in (("S2k", "AP", "subjects2k_ap"), ("DB++", "Spearman", "dreambench_spearman")):
        if mid in sc.patch:
            data, n = _data_note(mid, sc)
            rows.append({"dataset": ds, "metric": metric, "metric_id": mid, "dinov3": float(sc.patch[mid]),
                         "ours_label": sc.patch_label, "data": data, "n": n, "profile": profile})
    return pd.DataFrame(rows) if rows else None


_BENCH_OF = {"subjects2k_ap": "Subjects2k", "dreambench_spearman": "DreamBench++"}


def not_scored(cfg: Profile, sc: ReleasedScores | None = None) -> dict[str, str]:
    """What the released-source benchmark tables leave out and why (recorded in their provenance):
    the unpublished benchmarks, the released ID-Sim checkpoint, and any benchmark / scorer that
    could not be read in this run."""
    out = {f"benchmark {k}": v for k, v in UNPUBLISHED_BENCHMARKS.items()}
    out["ID-Sim (released checkpoint)"] = released_idsim_reason(cfg.idsim.released_model)
    out["ID-Sim (trained here)"] = ("ID-Sim's curated training set (real instance pairs + generative edits, "
                                    "App. A) is not public; the paper profile does not train ID-Sim on NearID data")
    if sc is not None:
        out.update(sc.missing)
    return out


def world_only_tables(cfg: Profile) -> dict[str, str]:
    """Tables notebook 09 writes from a trained ID-Sim that the ``released`` source cannot produce,
    with the reason for each (table name -> reason)."""
    from .ablations import OUTPUTS

    no_train = ("needs ID-Sim models trained with the recipe changed in one place, and ID-Sim's curated "
                "training set (real instance pairs + generative edits, App. A) is not public")
    out = {OUTPUTS[k]: f"training ablation ({k}): {no_train}" for k in cfg.idsim.ablation_tables}
    rel = released_idsim_reason(cfg.idsim.released_model)
    out["09_idsim_persam"] = f"Table 2c runs PerSAM on PODS: {UNPUBLISHED_BENCHMARKS['PODS']}; {rel}"
    out["claims_09_idsim"] = f"the claims compare ID-Sim with its frozen backbone, and no ID-Sim is scored: {rel}"
    return out
