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

The released ID-Sim rows are not produced here (:func:`released_idsim_reason`): the LoRA keys of
``adapter_model.safetensors`` address modules of the native torch.hub DINOv3 model inside the
package's ``ViTExtractor`` (``feature_extraction/extractor.py``), code that is neither on PyPI nor
readable from here; mapping those keys onto the ``transformers`` DINOv3 (separate q/k/v, other
module names) would be a guess, and a guessed format is not a reproduction.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

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
           "pair_scores", "subjects2k_metrics", "dbpp_metrics", "load_frozen_rows", "released_table",
           "world_only_tables"]

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


def pair_scores(encoder, first: Sequence[Any], second: Sequence[Any], batch_size: int = 16) -> np.ndarray:
    """Cosine similarity of ``encoder.embed`` of ``first[i]`` and ``second[i]`` (images or paths), in
    batches of ``batch_size`` pairs (the encoder's embeddings are L2-normalised)."""
    if len(first) != len(second):
        raise ValueError(f"pair_scores: {len(first)} first images vs {len(second)} second images")
    out = []
    with torch.no_grad():
        for i in range(0, len(first), batch_size):
            a = encoder.embed(list(first[i:i + batch_size]))
            b = encoder.embed(list(second[i:i + batch_size]))
            out.append((a * b).sum(-1).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def subjects2k_metrics(encoder, ds, batch_size: int = 16) -> tuple[dict[str, float], np.ndarray]:
    """``({subjects2k_ap, subjects2k_auc, n_pairs}, scores)``: AP (the paper's main metric) and
    ROC-AUC of the reference-test cosine against ``binary_label``; images streamed in batches."""
    scores = []
    for i in range(0, len(ds), batch_size):
        rows = ds[i:i + batch_size]
        scores.append(pair_scores(encoder, rows["reference_image"], rows["test_image"], batch_size))
    s = np.concatenate(scores) if scores else np.zeros(0)
    y = np.asarray(ds["binary_label"], dtype=int)
    res = {"n_pairs": int(len(s))}
    if len(s) and 0 < y.sum() < len(y):
        res["subjects2k_ap"] = M.verification_ap(s, y)
        res["subjects2k_auc"] = M.verification_auc(s, y)
    return res, s


def dbpp_metrics(encoder, pairs: pd.DataFrame, batch_size: int = 16) -> tuple[dict[str, float], np.ndarray]:
    """``({dreambench_spearman, dreambench_kendall, n_pairs, n_subjects}, scores)`` over
    :func:`nearid_lib.nearid.dbpp.dbpp_mean_ratings` rows: rank correlations of the reference-image
    cosine with the mean human rating (NaN under 3 pairs)."""
    s = pair_scores(encoder, pairs["reference"].tolist(), pairs["image"].tolist(), batch_size)
    res = {"n_pairs": int(len(s)), "n_subjects": int(pairs["subject"].nunique())}
    if len(s) >= 3:
        rc = M.rank_correlations(s, pairs["rating"].to_numpy(dtype=float))
        res["dreambench_spearman"], res["dreambench_kendall"] = rc["spearman"], rc["kendall"]
    return res, s


# ----------------------------------------------------------------------------- frozen rows
def load_frozen_rows(cfg: Profile) -> tuple[dict[str, Any], dict[str, str]]:
    """``(encoders, skipped)``: each of ``cfg.idsim.frozen_rows`` loaded through the registry (its
    weights through :mod:`nearid_lib.hub`) at ``idsim.image_size``, or its reason (not in the mirror
    with the download command, or the load error)."""
    from ..models import load_encoder, resolve_device

    device = resolve_device(cfg.device)
    encs, skipped = {}, {}
    for name in cfg.idsim.frozen_rows:
        kw = {"image_size": cfg.idsim.image_size} if cfg.idsim.image_size and name.startswith("dino") else {}
        try:
            encs[name] = load_encoder(name, device=device, **kw)[0]
        except (OSError, ValueError, KeyError) as err:     # HubError is an OSError
            skipped[name] = f"frozen row {name} not loaded: {err}"
    return encs, skipped


def released_table(results: Mapping[str, Mapping[str, float]], labels: Mapping[str, str], profile: str,
                   counts: Mapping[str, Mapping[str, int]]) -> pd.DataFrame:
    """Long table beside ``paper_values/idsim_fig25_full_results`` (keys model, metric_id): one row
    per (encoder, public metric) with ``data`` (what was scored) and ``n`` (pairs scored).
    ``results``: encoder -> {metric_id: value}; ``labels``: encoder -> ours_label; ``counts``:
    benchmark ("subjects2k" | "dreambench") -> {encoder: n}."""
    from .bench import BENCH_INFO

    rows = []
    for enc, res in results.items():
        for mid, v in res.items():
            if mid not in BENCH_INFO:
                continue
            bench, metric, _ = BENCH_INFO[mid]
            rows.append({"model": PAPER_MODEL_KEYS.get(enc, enc), "metric_id": mid, "benchmark": bench,
                         "metric": metric, "value": float(v), "ours_label": labels[enc], "data": _DATA[mid],
                         "n": int(counts[mid.split("_")[0]].get(enc, 0)), "profile": profile})
    return pd.DataFrame(rows)


def world_only_tables(cfg: Profile) -> dict[str, str]:
    """Tables notebook 09 writes from a trained ID-Sim that the ``released`` source cannot produce,
    with the reason for each (table name -> reason)."""
    from .ablations import OUTPUTS

    no_train = ("needs ID-Sim models trained with the recipe changed in one place, and ID-Sim's curated "
                "training set (real instance pairs + generative edits, App. A) is not public")
    out = {OUTPUTS[k]: f"training ablation ({k}): {no_train}" for k in cfg.idsim.ablation_tables}
    rel = released_idsim_reason(cfg.idsim.released_model)
    out["09_idsim_patch"] = (f"Table 2b compares ID-Sim with and without patch supervision: the no-patch model "
                             f"{no_train}; {rel}")
    out["09_idsim_persam"] = f"Table 2c runs PerSAM on PODS: {UNPUBLISHED_BENCHMARKS['PODS']}; {rel}"
    out["09_idsim_mllm"] = ("Table 2a's MLLM rows (GPT-4o/GPT-5/Gemini via hosted APIs, or the profile's "
                            "open judge) are not run on the released Subjects2k / DreamBench++ pairs in this "
                            f"profile, and its ID-Sim row is missing: {rel}")
    out["claims_09_idsim"] = f"the claims compare ID-Sim with its frozen backbone: {rel}"
    return out
