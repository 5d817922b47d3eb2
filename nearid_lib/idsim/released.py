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
  Their backbone is Meta's *native* DINOv3 code loaded through ``torch.hub`` (``facebookresearch/dinov3``)
  with the gated weights ``dinov3_vitl16_pretrain_lvd1689m-8aa4cbdd.pth`` (not redistributed);
  features = output of block 23 (before the final norm) at 448 px, register tokens dropped,
  embeddings mean-centred and L2-normalised, distance = 1 - cosine of the CLS embeddings
  (+ pooled-patch cosine in "joint").
* Benchmarks: Subjects2k (new, hub dataset ``chaenayo/Subjects2k``: ``reference_image``,
  ``test_image``, ``pair_id``, ``human_votes``, ``human_agreement``, ``binary_label``,
  ``num_human_votes``, ``gpt_score``) and DreamBench++ (its own release,
  :func:`nearid_lib.data.eval_datasets.load_dreambenchpp`). PODS, DeepFashion2, AerialCattle2017,
  PetFace and CUTE are public datasets, but the evaluation subsets ID-Sim drew from them (PetFace's
  3,250 pairs, CUTE's 1,800 triplets, AerialCattle's 2,329 filtered images, the DeepFashion2 query /
  gallery lists) are not published: :data:`UNPUBLISHED_BENCHMARKS`.
* The selective-sensitivity edit grids (App. F) are not published ("coming soon" in the authors'
  README): :data:`SENSITIVITY_REASON`.

What notebook 09 produces from public data (:func:`score_released`): Figure 25's Subjects2k and
DreamBench++ columns for the released ID-Sim (model ``ID-Sim``), the frozen rows
(``idsim.frozen_rows``) and the NearID head; Table 2a's embedding rows (the released ID-Sim as
``Ours (ViT-L)``), its ``MLLM*`` row from the datasets' own GPT-4o annotations (Subjects2k
``gpt_score``, DreamBench++ ``data_gpt_rating``) and an open MLLM judge row; Table 2b on S2k / DB++:
the frozen DINOv3's patch column (``dinov3``) beside the released ID-Sim's (``ours``).

The released ID-Sim (``idsim.released_model``) is the registered encoder ``idsim-release``
(:mod:`nearid_lib.idsim.release_model`): the LoRA, whose keys are in Meta's native key space, is
merged into the fused qkv of the ``transformers`` DINOv3 (``facebook/dinov3-vitl16-pretrain-lvd1689m``,
Meta's weights converted) and split back into q/k/v; both repos are read through
:mod:`nearid_lib.hub`. When it cannot be read (e.g. not in the mirror) its rows are absent and
:func:`not_scored` says why, with the download command. Table 2b's ``ours_no_patch`` (ID-Sim trained
with the CLS loss only) is not released.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from .. import hub
from ..data.schema import DataError
from .public_eval import (
    PUBLIC_METRICS,
    dbpp_gpt_metrics,
    dbpp_metrics,
    judge_metrics,
    judge_pairs,
    pair_scores,
    public_scores,
    subjects2k_gpt_metrics,
    subjects2k_metrics,
)
from .release_model import RELEASE_FILES
from .release_rows import RELEASE_LABELS, patch_column, release_rows, row_name, table2a_row

if TYPE_CHECKING:
    from ..config import Profile

from ..data.eval_datasets import (DBPP_DIRNAME, DOWNLOAD_STEPS, DreamBenchPP, dbpp_mean_ratings,
                                  load_dreambenchpp, load_subjects2k)
from ..features.profile_encoders import idsim_frozen_row
from ..models import resolve_device, resolve_name
from ..paths import downloads_dir
from ..judge.shards import judge_answers_dir
from ..steps.placement import device_kwargs, placement_plan
from .ablations import OUTPUTS, PLACEMENT_OUTPUT
from .eval_suite import BENCH_INFO
from .mllm import idsim_judge, mllm_table
from .release_model import release_available

__all__ = ["RELEASED_FILES", "DINOV3_NATIVE_WEIGHTS", "UNPUBLISHED_BENCHMARKS",
           "SENSITIVITY_REASON", "PAPER_MODEL_KEYS", "RELEASE_ROW", "RELEASE_KEY", "released_idsim_reason", "mllm_row_judge",
           "pair_scores", "subjects2k_metrics", "subjects2k_gpt_metrics", "dbpp_metrics", "dbpp_gpt_metrics",
           "judge_pairs", "judge_metrics", "load_frozen_rows", "ReleasedScores",
           "load_benchmarks", "public_scores", "score_released", "released_table", "released_mllm_table",
           "released_patch_table", "not_scored", "world_only_tables"]

RELEASED_FILES = RELEASE_FILES      # the files of the release's hub repo
DINOV3_NATIVE_WEIGHTS = "dinov3_vitl16_pretrain_lvd1689m-8aa4cbdd.pth"
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
PAPER_MODEL_KEYS = {"dinov3-vitl16": "DINOv3", "clip-vit-l14": "CLIP", "idsim-release": "ID-Sim"}
RELEASE_ROW = "idsim-release"                  # the released ID-Sim's scorer key (its registry name)
RELEASE_KEY = "ID-Sim (released checkpoint)"   # its entry in not_scored()
_RELEASE_2A_ROW = "Ours (ViT-L)"               # its row of paper_values/idsim_table2a_mllm

_DATA = PUBLIC_METRICS


def released_idsim_reason(repo_id: str) -> str | None:
    """Why the released ID-Sim ``repo_id`` (or its base DINOv3) cannot be read, without loading it:
    which one is not in the hub mirror, with the download command (:class:`~nearid_lib.hub.HubError`'s
    message); None when both are in the mirror, or when no mirror is set (the hub is asked at load
    time, and a failed load is the reason then)."""
    return release_available(repo_id)


# ----------------------------------------------------------------------------- frozen rows
def load_frozen_rows(cfg: Profile) -> tuple[dict[str, Any], dict[str, str]]:
    """``(encoders, skipped)``: each of ``cfg.idsim.frozen_rows`` loaded (:func:`~nearid_lib.features.profile_encoders.idsim_frozen_row`),
    or its reason (not in the mirror with the download command, or the load error)."""
    encs, skipped = {}, {}
    for name in cfg.idsim.frozen_rows:
        try:
            encs[name] = idsim_frozen_row(cfg, name)
        except (OSError, ValueError, KeyError) as err:     # HubError is an OSError
            skipped[name] = f"frozen row {name} not loaded: {err}"
    return encs, skipped


@dataclass
class ReleasedScores:
    """Everything notebook 09 scores on the public ID-Sim benchmarks in the ``released`` source.

    ``results``: scorer -> {metric_id: value, n_pairs...} for pooled embeddings (frozen rows by
    registry name, ``nearid``, the released ID-Sim as :data:`RELEASE_ROW`: its CLS embedding);
    ``patch``: the frozen ID-Sim backbone's aggregated patch embedding (Table 2b's DINOv3 column);
    ``release_patch``: the released ID-Sim's (Table 2b's ``ours``); ``gpt``: the datasets' own
    GPT-4o annotations (Table 2a MLLM*);
    ``judge``: the open MLLM judge (``idsim.mllm_judge``) and its per-pair ``answers``;
    ``missing``: benchmark or scorer -> why it is absent. The other released checkpoints are
    ``results`` rows under their registry names (:mod:`.release_rows`), their patch embeddings in
    ``extra_patch`` (name -> (metrics, label)); ``pair_scores`` (scorer -> {"s2k", "dbpp"} per-pair
    similarities), ``s2k`` and ``pairs`` (the benchmarks) are the claims' evidence."""

    results: dict[str, dict[str, float]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    patch: dict[str, float] | None = None
    patch_label: str = ""
    release_patch: dict[str, float] | None = None
    release_patch_label: str = ""
    gpt: dict[str, float] = field(default_factory=dict)
    judge: dict[str, float] | None = None
    judge_label: str = ""
    answers: pd.DataFrame | None = None
    missing: dict[str, str] = field(default_factory=dict)
    n_s2k: int = 0
    n_dbpp: int = 0
    n_dbpp_subjects: int = 0
    extra_patch: dict[str, tuple[dict, str]] = field(default_factory=dict)
    pair_scores: dict[str, dict] = field(default_factory=dict)
    s2k: Any = None
    pairs: pd.DataFrame | None = None

    @property
    def any_benchmark(self) -> bool:
        return bool(self.n_s2k or self.n_dbpp)


def load_benchmarks(cfg: Profile) -> tuple[Any, DreamBenchPP | None, pd.DataFrame | None, dict[str, str]]:
    """``(subjects2k, dreambenchpp, dbpp_pairs, missing)``: Subjects2k from the hub resolver
    (``idsim.subjects2k_repo``), DreamBench++ from ``eval.dbpp_root`` or
    ``downloads_dir()/"dreambenchpp"`` in its publishers' layout with its mean-rating pairs; a
    benchmark that cannot be read is None with its reason in ``missing``. At most
    ``idsim.max_pairs`` pairs of each."""
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
    loaded at a time), the released ID-Sim (:func:`~nearid_lib.features.profile_encoders.idsim_release_row`: CLS and patch embedding; a
    failed load is a reason in ``missing[RELEASE_KEY]``), the NearID head ``nearid`` (notebook
    03's, when given), the datasets' own
    GPT-4o annotations, and the open MLLM judge ``idsim.mllm_judge`` (on at most
    ``idsim.mllm_max_pairs`` pairs per benchmark)."""
    bs = cfg.idsim.eval_batch_size
    s2k, db, pairs, missing = load_benchmarks(cfg)
    out = ReleasedScores(missing=dict(missing), n_s2k=len(s2k) if s2k is not None else 0,
                         n_dbpp=len(pairs) if pairs is not None else 0,
                         n_dbpp_subjects=int(pairs["subject"].nunique()) if pairs is not None else 0)
    if not out.any_benchmark:
        return out
    out.s2k, out.pairs = s2k, pairs
    backbone = resolve_name(cfg.idsim.backbone)

    for name in cfg.idsim.frozen_rows:
        try:
            enc = idsim_frozen_row(cfg, name)
        except (OSError, ValueError, KeyError) as err:     # HubError is an OSError
            out.missing[name] = f"frozen row {name} not loaded: {err}"
            log(out.missing[name])
            continue
        out.results[name] = public_scores(enc, s2k, pairs, bs, scores=out.pair_scores.setdefault(name, {}))
        out.labels[name] = f"{name} pooled embedding (frozen; {enc.weights}, {enc.preprocess.image_size} px)"
        if resolve_name(name) == backbone:
            out.patch = public_scores(enc, s2k, pairs, bs, "patch")
            out.patch_label = f"{name} mean of L2-normalised patch tokens (frozen; {enc.weights})"
        del enc
    for name, r in release_rows(cfg, s2k, pairs, bs, log).items():        # the four released checkpoints
        if "missing" in r:
            out.missing[RELEASE_KEY if name == RELEASE_ROW else RELEASE_LABELS[name][2]] = r["missing"]
            continue
        out.results[name], out.labels[name], out.pair_scores[name] = r["pooled"], r["label"], r["scores"]
        if name == RELEASE_ROW:
            out.release_patch, out.release_patch_label = r["patch"], r["patch_label"]
        else:
            out.extra_patch[name] = (r["patch"], r["patch_label"])
    if nearid is not None:
        nearid = nearid.to(resolve_device(cfg.device))
        out.results["nearid"] = public_scores(nearid, s2k, pairs, bs)
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
    plan = None
    if cfg.idsim.mllm_judge and cfg.idsim.mllm_judge != "tiny":
        # the one placement rule of large models: one GPU when it holds the model, else device_map over
        # a group, else the row is skipped with the numbers (never an out-of-memory an hour into the run)
        plan = placement_plan(cfg.idsim.mllm_judge, hub.hub_dir())
    if cfg.idsim.mllm_judge and plan is not None and not plan.fits:
        out.missing["judge"] = f"MLLM judge {cfg.idsim.mllm_judge} does not fit this machine's GPUs: {plan.describe()}"
    elif cfg.idsim.mllm_judge:
        place = device_kwargs(plan, 0) if plan is not None and plan.replicas else None
        judge = mllm_row_judge(cfg, place)
        try:
            # the answers the launched judge step kept are read; only a pair without one loads the weights
            out.judge, out.answers = judge_metrics(judge, s2k, pairs, cfg.idsim.mllm_max_pairs,
                                                   batch_size=max(1, min(bs, 4)),
                                                   answers_dir=judge_answers_dir(cfg.name, judge))
        except (OSError, ValueError, torch.OutOfMemoryError) as err:
            out.missing["judge"] = (f"MLLM judge {cfg.idsim.mllm_judge} not loaded: {' '.join(str(err).split())[:300]}"
                                    + (f" (placement: {plan.describe()})" if plan is not None else ""))
        else:
            out.judge_label = (f"MLLM judge {judge.name}, identity prompt (coverage {out.judge['coverage']:.0%} "
                               f"of {out.judge['n_pairs']} pairs)")
    else:
        out.missing["judge"] = "idsim.mllm_judge is None: no open MLLM judge row"
    return out


def mllm_row_judge(cfg: Profile, placement: dict | None = None):
    """ID-Sim Table 2a's open MLLM judge (``idsim.mllm_judge``) as the notebook and the launched judge
    step build it: the same prompt, answer budget and fingerprint, so both use one answers folder
    (:func:`~nearid_lib.judge.shards.judge_answers_dir`); its weights load only for a pair without a
    kept answer, on ``placement`` (a replica's ``device_map``) or the profile's device."""
    return idsim_judge(cfg.idsim.mllm_judge, device=str(resolve_device(cfg.device)), placement=placement,
                       max_new_tokens=cfg.idsim.mllm_max_new_tokens)


def _data_note(mid: str, sc: ReleasedScores) -> tuple[str, int]:
    if mid.startswith("subjects2k"):
        return _DATA[mid], sc.n_s2k
    return f"{_DATA[mid]} ({sc.n_dbpp_subjects} subjects)", sc.n_dbpp


def released_table(sc: ReleasedScores, profile: str) -> pd.DataFrame:
    """Long table beside ``paper_values/idsim_fig25_full_results`` (keys model, metric_id): one row
    per (scorer, public metric) with ``data`` (what was scored) and ``n`` (pairs scored). Frozen
    rows with a paper counterpart take its model key (:data:`PAPER_MODEL_KEYS`)."""
    rows = []
    for enc, res in sc.results.items():
        for mid, v in res.items():
            bench, metric, _ = BENCH_INFO[mid]
            data, n = _data_note(mid, sc)
            model = (row_name(enc) if enc in RELEASE_LABELS
                     else PAPER_MODEL_KEYS.get(enc, "NearID head" if enc == "nearid" else enc))
            rows.append({"model": model,
                         "metric_id": mid, "benchmark": bench, "metric": metric, "value": float(v),
                         "ours_label": sc.labels[enc], "data": data, "n": n, "profile": profile})
    return pd.DataFrame(rows)


def released_mllm_table(sc: ReleasedScores, profile: str) -> pd.DataFrame:
    """ID-Sim Table 2a from public data: the embedding rows, ``MLLM* (GPT-4o)`` = the datasets' own
    GPT-4o annotations (Subjects2k ``gpt_score``, DreamBench++ GPT ratings) and the open judge; a
    NaN cell says why in ``note``."""
    results = {k: {**v, "n_pairs": None} for k, v in sc.results.items()}
    labels = {k: (table2a_row(k) if k in RELEASE_LABELS else "", sc.labels[k]) for k in sc.results}
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
    """ID-Sim Table 2b on the public benchmarks (S2k AP, DB++ Spearman): ``dinov3`` = the frozen
    backbone's aggregated patch embedding, ``ours`` = the released ID-Sim's (each column only when
    it was scored); ``ours_no_patch`` needs an ID-Sim trained with the CLS loss only (not released).
    None when neither was scored."""
    cols = [(c, v, lab) for c, v, lab in (("dinov3", sc.patch, sc.patch_label),
                                         ("ours", sc.release_patch, sc.release_patch_label),
                                         *((patch_column(n), v, lab) for n, (v, lab) in sc.extra_patch.items())) if v]
    if not cols:
        return None
    rows = []
    for ds, metric, mid in (("S2k", "AP", "subjects2k_ap"), ("DB++", "Spearman", "dreambench_spearman")):
        have = [(c, v[mid], lab) for c, v, lab in cols if mid in v]
        if have:
            data, n = _data_note(mid, sc)
            rows.append({"dataset": ds, "metric": metric, "metric_id": mid,
                         **{c: float(x) for c, x, _ in have},
                         "ours_label": "; ".join(f"{c}: {lab}" for c, _, lab in have) if len(cols) > 1
                         else have[0][2], "data": data, "n": n, "profile": profile})
    return pd.DataFrame(rows) if rows else None


_BENCH_OF = {"subjects2k_ap": "Subjects2k", "dreambench_spearman": "DreamBench++"}


def not_scored(cfg: Profile, sc: ReleasedScores | None = None) -> dict[str, str]:
    """What the released-source benchmark tables leave out and why (recorded in their provenance):
    the unpublished benchmarks, what of the released ID-Sim is not scored (when it is: only Table
    2b's unreleased ``ours_no_patch``), and any benchmark / scorer that could not be read in this run."""
    out = {f"benchmark {k}": v for k, v in UNPUBLISHED_BENCHMARKS.items()}
    repo = cfg.idsim.released_model
    if sc is not None and RELEASE_ROW in sc.results:
        out[RELEASE_KEY] = (f"the released ID-Sim {repo} is scored (Figure 25 'ID-Sim', Table 2a "
                            f"'{_RELEASE_2A_ROW}', Table 2b 'ours'); Table 2b's ours_no_patch (ID-Sim trained with "
                            f"the CLS loss only) is not released")
    else:
        out[RELEASE_KEY] = ((sc.missing.get(RELEASE_KEY) if sc is not None else None)
                            or released_idsim_reason(repo)
                            or f"released ID-Sim checkpoint {repo} not scored: no public benchmark could be read")
    out["ID-Sim (trained here)"] = ("ID-Sim's curated training set (real instance pairs + generative edits, "
                                    "App. A) is not public; the paper profile does not train ID-Sim on NearID data")
    if sc is not None:
        out.update(sc.missing)
    return out


def world_only_tables(cfg: Profile) -> dict[str, str]:
    """Tables notebook 09 writes from a trained ID-Sim that the ``released`` source cannot produce,
    with the reason for each (table name -> reason)."""
    no_train = ("needs ID-Sim models trained with the recipe changed in one place, and ID-Sim's curated "
                "training set (real instance pairs + generative edits, App. A) is not public")
    out = {OUTPUTS[k]: f"training ablation ({k}): {no_train}" for k in cfg.idsim.ablation_tables}
    if cfg.idsim.adapt_stages_choices:
        out[PLACEMENT_OUTPUT] = f"the LoRA placement is chosen by training ID-Sim once per candidate: {no_train}"
    rel = released_idsim_reason(cfg.idsim.released_model)
    tail = f"; {rel}" if rel else ""
    out["09_idsim_persam"] = f"Table 2c runs PerSAM on PODS: {UNPUBLISHED_BENCHMARKS['PODS']}{tail}"
    return out
