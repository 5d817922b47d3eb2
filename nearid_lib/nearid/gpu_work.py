"""NearID's GPU-heavy steps in the resource ledger (:mod:`nearid_lib.steps.ledger`): materialising the
release (curation), the token store (prefill), the head trainings of notebook 03 and of the ablation
notebooks 04-07, and the VLM judge over NearID-bench, MTG and DreamBench++.

Items are counted by the enumerations the steps run: the judge's pairs as
:func:`~nearid_lib.nearid.pairs.nearid_pairs` lists them (one positive pair per view pair, one
distractor pair per view and source, each under full and FG-only inputs), the trainings as notebooks
03-07 call ``run_rows`` (their rows x the profile's seeds, a run two notebooks share trained once),
the store's grids as :func:`~nearid_lib.nearid.prefill_step.prefill_items` lists them (the formula,
:func:`~nearid_lib.features.disk.store_grids`, lives in the core: the preflight's disk plan counts with it).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from types import SimpleNamespace

from ..features.disk import store_grids
from ..config import get_profile, profile_to_dict, with_overrides
from ..judge.plan import judge_cost
from ..steps.ledger import (Cost, ModelUse, Sizes, Step, measured_results, per_source_pairs, register_step,
                            suite_cost, suite_entry)
from . import ablations as A
from .group import groups_of
from .judges import judge_models
from .sweep import RowSpec, seeds_of

__all__ = ["training_runs", "training_passes", "run_configs", "store_grids", "NOTEBOOK_RUN_ROWS"]

GB = 1e9
STEPS_PER_RUN = 3_350          # NearID App. D: 11 epochs at batch 128
ROWS_PER_STEP = 128
PNG_BYTES_PER_VIEW = 512 * 512 * 3 * 0.6      # preflight's PNG ratio at zlib level 1

def _judges(cfg) -> list[str]:
    return judge_models(cfg) if cfg is not None else list(_JUDGE_REPOS)


_JUDGE_REPOS = ("Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct")


def _judge_pairs(s: Sizes, cfg) -> int:
    pos, dist = per_source_pairs(s, "test", cfg.eval.vlm_max_ids if cfg is not None else None)
    variants = 2 if cfg is None or cfg.eval.fg_only else 1
    return round(variants * (pos + dist * s.eval_sources))


def _mtg_pairs(s: Sizes, cfg) -> int:
    n = s.mtg_pairs.get("test", 0)
    if cfg is not None and cfg.eval.vlm_max_ids:
        n = min(n, cfg.eval.vlm_max_ids)
    # 5 similarity sets (nearid.pairs.mtg_pairs) under full and FG-only inputs
    return 5 * (2 if cfg is None or cfg.eval.fg_only else 1) * n


def _record_bytes() -> tuple[float, str]:
    sc = measured_results("paper_scale_cuda.json")
    if sc:
        return float(sc["store"]["int8"]["record_bytes"]), "int8 record measured (paper_scale_cuda.json)"
    return 729 * (1152 + 4) * 1.0, "int8 record: 729 tokens x (1,152 + a float32 scale)"


def _curate_cost() -> Cost:
    cu = suite_entry("curation")
    if cu:
        return suite_cost(cu, 1.0 / cu["identities_per_s"], "cpu",
                          f"{cu['identities_per_s']:.2f} identities/s on one GPU with {cu['sizes'].get('io_threads')} "
                          f"threads (CLIPSeg {cu.get('masks_per_s', float('nan')):.0f} masks/s)")
    return Cost(4.5 * 3600 / 19_386, "A100-80GB", "cpu", "projected",
                "4-5 h for the release on one GPU rank (decode, CLIPSeg where a view has no mask, PNG writes)")


def _backbone_cost() -> Cost:
    pf = suite_entry("prefill")
    if pf:
        rate = pf.get("grids_per_s_steady") or pf["grids_per_s"]
        return suite_cost(pf, 1.0 / rate, "compute", f"{rate:.0f} grids/s per GPU in the steady state, decoding in "
                          f"{pf['sizes'].get('dataloader_workers')} DataLoader workers, int8 writes included")
    sc = measured_results("paper_scale_cuda.json")
    if sc:
        rate = sc["backbone"]["full_img_per_s"]
        return Cost(1.0 / rate, "H100", "compute", "measured",
                    f"so400m at {rate:.0f} img/s on one H100 ({sc.get('started', '')[:10]}, paper_scale_cuda.json), "
                    "decoding hidden by DataLoader workers")
    return Cost(1 / 400, "H100", "compute", "projected", "so400m at ~400 img/s on an H100 (not measured here)")


def _head_cost() -> Cost:
    """One head training: :data:`STEPS_PER_RUN` steps of one head (the suite's grouped-head entry, else
    the single-head step measured at the paper's geometry)."""
    hg = suite_entry("head_group")
    if hg:
        auto = hg["groups"][0].get("autocast")        # the profile's precision: the first measured
        one = min((g for g in hg["groups"] if g.get("autocast") == auto), key=lambda g: g["heads"])
        per = one["step_s"] / one["heads"]
        return suite_cost(hg, STEPS_PER_RUN * per, "compute", f"{STEPS_PER_RUN:,} steps x {per * 1e3:.0f} ms a head "
                          f"step ({one['heads']} head(s) a step, autocast {auto}); store reads counted apart")
    sc = measured_results("paper_scale_cuda.json")
    if sc:
        one = next(x["fast_s"] for x in sc["head"]["steps"] if x["shape"][0] == 656)
        return Cost(STEPS_PER_RUN * one, "H100", "compute", "measured",
                    f"{STEPS_PER_RUN:,} steps x a head step of 656 slots ({one * 1e3:.0f} ms on one H100, "
                    "paper_scale_cuda.json); store reads counted apart")
    return Cost(STEPS_PER_RUN * 0.05, "H100", "compute", "projected", "a head step ~50 ms on an H100 (not measured)")


# notebook -> its run_rows calls in order, by the row builders of nearid.ablations they pass
# (tests/test_steps_plan.py checks that the notebooks still make these calls)
NOTEBOOK_RUN_ROWS = {"03_train_nearid": ("main",), "04_eval_nearid_bench": ("main", "fg_ceiling"),
                     "05_loss_ablation": ("loss",), "06_alpha_beta_sweep": ("alpha", "beta"),
                     "07_data_ablation": ("data",)}


def run_configs(cfg=None, data=None) -> list[tuple[str, str, list]]:
    """``[(notebook, rows, configurations)]`` of every ``run_rows`` call of notebooks 03-07
    (:data:`NOTEBOOK_RUN_ROWS`), in order: each row of the call at each of the profile's seeds, as the
    notebook builds them (``data``: the release, for notebook 07's data rows; without it a stand-in
    with the profile's training sources)."""
    cfg = cfg if cfg is not None else get_profile("paper")
    data = data if data is not None else SimpleNamespace(train_sources=list(cfg.world.train_sources))
    ceiling = RowSpec("fg_trained", "NearID head trained FG-only (ceiling)",
                      {"train.mask_p_anchor": 1.0, "train.mask_p_positive": 1.0, "train.mask_p_distractor": 1.0})
    rows = {"main": lambda: [A.main_row(cfg)], "fg_ceiling": lambda: [ceiling], "loss": lambda: A.loss_rows(cfg),
            "alpha": lambda: A.alpha_rows(cfg), "beta": lambda: A.beta_rows(cfg),
            "data": lambda: [r for r, *_ in A.data_rows(cfg, data)]}
    return [(nb, kind, [replace(with_overrides(cfg, r.overrides), seed=int(seed)) for r in rows[kind]()
                        for seed in seeds_of(cfg)])
            for nb, kinds in NOTEBOOK_RUN_ROWS.items() for kind in kinds]


def training_passes(cfg=None, data=None) -> list[dict]:
    """Per ``run_rows`` call of notebooks 03-07 (:func:`run_configs`): the new runs it trains (a
    configuration an earlier call trained is not trained again) and its passes over the token store:
    one per batch stream (``nearid.group``), since ``nearid.sweep.train_grouped`` gives each worker
    process whole streams."""
    done: set[str] = set()
    out = []
    for nb, kind, configs in run_configs(cfg, data):
        new = {}
        for c in configs:
            k = hashlib.sha1(json.dumps(profile_to_dict(c), sort_keys=True, default=str).encode()).hexdigest()
            if k not in done:
                new[k] = c
        done |= set(new)
        groups = groups_of(list(new.values()))
        out.append({"notebook": nb, "rows": kind, "runs": len(new), "streams": len(groups),
                    "heads_per_pass": [len(g) for g in groups], "configs": list(new.values())})
    return out


def training_runs(cfg, notebooks: tuple[str, ...]) -> int:
    """New head trainings that ``notebooks`` (of 03-07) start (:func:`training_passes`)."""
    return sum(p["runs"] for p in training_passes(cfg) if p["notebook"] in notebooks)


def _slots_per_step(s: Sizes) -> float:
    ids = max(1, s.ids.get("train", 0))
    return ROWS_PER_STEP * (s.views("train") / ids + s.train_sources)


_so400m = ModelUse("google/siglip2-so400m-patch14-384", working_bytes=int(3.5 * GB), splittable=False,
                   working_basis="activations at batch 128, measured on an H100", in_kernels=True)
_STORE_RESUME = "the store is keyed per grid: a killed prefill resumes at the first grid it lacks"

register_step(Step(
    name="curate", command="make curate", target="curate", entry="nearid_lib.data.curate_step", feeds="every NearID table (the materialised release and its masks)",
    models=(ModelUse("CIDAS/clipseg-rd64-refined", working_bytes=int(1 * GB), splittable=False),),
    items=lambda s, cfg: sum(s.ids.values()), item="identities",
    cost=_curate_cost,
    resume="an identity is written atomically and skipped when complete",
    outputs="$NEARID_DATA/paper/nearid (PNG views, masks, distractors)",
    written=lambda s, cfg: sum(s.views(k) for k in s.ids) * (PNG_BYTES_PER_VIEW * (1 + s.eval_sources) + 512 * 512 * 0.02)))

register_step(Step(
    name="prefill", command="make prefill", target="prefill", entry="nearid_lib.nearid.prefill_step", feeds="the token store every head training and evaluation reads",
    models=(_so400m,), items=lambda s, cfg: store_grids(s), item="grids", cost=_backbone_cost,
    resume=_STORE_RESUME, outputs="$NEARID_CACHE/paper (int8 token store)",
    written=lambda s, cfg: store_grids(s) * _record_bytes()[0]))


def _train_step(name: str, notebooks: tuple[str, ...], command: str, feeds: str) -> Step:
    def read(s, cfg):
        # one pass over the store per batch stream of a call (every slot read: an upper bound)
        passes = sum(len(p["heads_per_pass"]) for p in training_passes(cfg) if p["notebook"] in notebooks)
        return passes * STEPS_PER_RUN * _slots_per_step(s) * _record_bytes()[0]

    return Step(
        name=name, command=command, feeds=feeds, models=(_so400m,), target="train-heads",
        entry="nearid_lib.nearid.train_step",
        items=lambda s, cfg: training_runs(cfg, notebooks), item="head trainings", cost=_head_cost,
        resume="a run checkpoints every train.checkpoint_every steps and resumes from its last",
        outputs="$NEARID_OUT/paper/checkpoints", read=read)


register_step(_train_step("train", ("03_train_nearid",), "make train-heads (notebook 03's runs)", "NearID Tables 1, 3"))
register_step(_train_step("sweep", ("04_eval_nearid_bench", "05_loss_ablation", "06_alpha_beta_sweep",
                                    "07_data_ablation"), "make train-heads (notebooks 04-07's runs)",
                          "NearID Tables 4-9, the FG ceiling"))

_judge_uses = tuple(ModelUse(r) for r in _JUDGE_REPOS)
_JUDGE_ENTRY = "nearid_lib.nearid.judge_step"
_JUDGE_RESUME = "answers appended per pair under $NEARID_CACHE/paper/judge_answers; a rerun judges only the rest"
register_step(Step(
    name="judge-nearid", command="make judge", target="judge", entry=_JUDGE_ENTRY, feeds="NearID Table 1's Qwen3-VL row, Table 7's judge scales",
    models=_judge_uses, models_of=_judges, per_model=True, items=_judge_pairs, item="pairs", cost=judge_cost,
    resume=_JUDGE_RESUME, outputs="judge answers (JSONL per rank)",
    skip="NEARID_SET='eval.vlm_judge=none;eval.vlm_scales=' (their rows stay empty with the reason)"))
register_step(Step(
    name="judge-mtg", command="make judge", target="judge", entry=_JUDGE_ENTRY, feeds="MTG M-O / SSR / PA of the judge rows",
    models=_judge_uses, models_of=_judges, per_model=True, items=_mtg_pairs, item="pairs", cost=judge_cost,
    resume=_JUDGE_RESUME, outputs="judge answers (JSONL per rank)",
    skip="NEARID_SET='eval.vlm_judge=none;eval.vlm_scales='"))
register_step(Step(
    name="judge-dbpp", command="make judge", target="judge", entry=_JUDGE_ENTRY, feeds="NearID Table 1's DB++ column and Table 2 for the judge row",
    models=(ModelUse(_JUDGE_REPOS[0]),), models_of=lambda cfg: [cfg.eval.vlm_judge] if cfg.eval.vlm_judge else [],
    items=lambda s, cfg: s.dbpp_generations, item="generations", cost=judge_cost,
    resume=_JUDGE_RESUME, outputs="judge answers (JSONL per rank)", skip="NEARID_SET=eval.vlm_judge=none"))
