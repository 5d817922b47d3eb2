"""ID-Sim's experiment: train it on the world or score the release, every table of notebook 09.

One function per stage the notebook shows, in the notebook's order; each does its profile's work
(``idsim.source``), writes its tables with :meth:`~nearid_lib.run.Run.write_table` or skips them
with :meth:`~nearid_lib.run.Run.skip_table` and the reason, and returns a :class:`StageResult`
whose ``tables`` and ``figures`` the notebook displays (empty where the profile has none)::

    placement = choose_lora_placement(run, cfg, data)           # 09_idsim_lora_placement
    cfg = placement.cfg                                          # the profile ID-Sim is trained with
    training = train_models(run, cfg, data, placement)           # checkpoints, the loss curve
    bench = score_benchmarks(run, cfg, data, training)           # 09_idsim_benchmarks, 09_chance
    patch = patch_embeddings(run, cfg, data, placement, training, bench)   # 09_idsim_patch
    mllm = mllm_comparison(run, cfg, data, bench)                # 09_idsim_mllm
    persam = persam_segmentation(run, cfg, data, training, bench, patch)   # 09_idsim_persam
    ablations = training_ablations(run, cfg, data, placement)    # Table 3, Supp. Tables 5-9
    claims = idsim_claims(run, cfg, bench, ablations, persam)    # claims_09_idsim

``idsim.source = "world"`` (smoke, mini): the LoRA placement is chosen on val, ID-Sim is trained
for ``idsim.n_seeds`` seeds over one cache of frozen prefix features (``cache_dir(profile)/idsim``;
every finished training kept under ``runs/`` by :class:`~nearid_lib.idsim.train.TrainedRuns`), the
first seed saved as the published checkpoint (``checkpoint_dir(profile)/idsim``, the others in
``seeds/seed<k>``), and scored on the world's analogue of every benchmark kind of ID-Sim Figure 25
(:mod:`.eval_suite`), Tables 2a-2c, the training ablations and the claims.

``idsim.source = "released"`` (paper): nothing is trained (ID-Sim's curated training set is not
public); the public benchmarks are scored with the released checkpoint, the frozen rows and the
NearID head (:func:`~nearid_lib.idsim.released.score_released`), and every table that needs ID-Sim
trained here is skipped with its reason (:func:`~nearid_lib.idsim.released.world_only_tables`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import pandas as pd

from ..chance import chance_check
from ..claims import claim, evaluate_claims, pool_seeds
from ..io_utils import write_csv
from ..models import load_encoder
from ..paths import cache_dir, checkpoint_dir
from ..plots import metric_bars
from ..runtime.seeding import make_rng
from .ablations import (OUTPUTS, PLACEMENT_OUTPUT, ablation_claims, ablation_runs, ablation_table, choose_placement,
                        placement_label, row_profile)
from .baselines import baseline_embeddings
from .claims import CLAIMS_BY_NOTEBOOK, IDSIM_CLAIMS, RELEASED_CLAIMS, benchmark_evidence, released_evidence
from .embed import model_embeddings, token_maps
from .eval_suite import (METRIC_LABELS, bench_keys, benchmark_table, embed_encoders, encoder_labels, evaluate_sets,
                         mini_benchmark_sets, patch_table, seed_mean)
from .mllm import idsim_judge, judge_graded, mllm_table
from .model import save_idsim, seed_checkpoint_dir
from .persam import mask_predictor, mini_persam_queries, persam_benchmark, persam_table
from .prefix import PrefixStore
from .released import (RELEASE_KEY, ReleasedScores, not_scored, released_mllm_table, released_patch_table,
                       released_table, score_released, world_only_tables)
from .train import TrainedRuns, train_idsim_seeds

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData
    from ..run import Run

__all__ = ["NOTEBOOK", "StageResult", "LoraPlacement", "TrainedModels", "Benchmarks", "PatchEmbeddings",
           "Ablations", "trains_here", "choose_lora_placement", "train_models", "loss_curve_figure",
           "score_benchmarks", "patch_embeddings", "mllm_comparison", "persam_segmentation",
           "training_ablations", "idsim_claims"]

NOTEBOOK = "09_train_idsim"


def trains_here(cfg: Profile) -> bool:
    """Whether this profile trains ID-Sim on its world (``idsim.source = "world"``); otherwise it
    scores the released checkpoint on the public benchmarks (``"released"``)."""
    return cfg.idsim.source == "world"


def _silent(message: str) -> None:
    """A ``log`` that prints nothing (the training progress is not part of the notebook's output)."""


def _skip_world_only(run: Run, cfg: Profile, names) -> None:
    """Skip each of ``names`` that the released source cannot produce, with its reason."""
    why = world_only_tables(cfg)
    for name in names:
        if name in why:
            run.skip_table(name, why[name])


@dataclass
class StageResult:
    """What one stage of notebook 09 made: ``tables`` (tables and values to display, in order) and
    ``figures`` (already saved with :meth:`~nearid_lib.run.Run.figure`); either is empty where the
    profile produces none."""

    tables: list[Any] = field(default_factory=list)
    figures: list[Any] = field(default_factory=list)


@dataclass
class LoraPlacement(StageResult):
    """The LoRA placement stage: ``cfg`` is the profile ID-Sim is trained with (the chosen
    ``adapt_stages`` set; the given profile where nothing is chosen), ``trained`` the trainings of
    this notebook (None where nothing is trained), ``train_prefix`` / ``val_prefix`` the caches of
    frozen prefix features, ``table`` the val table (None where not chosen)."""

    cfg: Any = None
    trained: TrainedRuns | None = None
    train_prefix: Path | None = None
    val_prefix: Path | None = None
    table: pd.DataFrame | None = None


@dataclass
class TrainedModels(StageResult):
    """The training stage: ``runs`` (:func:`~nearid_lib.idsim.train.train_idsim_seeds`'s dicts, the
    profile's seed first; empty where nothing is trained) and the published ``checkpoint``."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path | None = None

    @property
    def model(self):
        """The first seed's model (the published checkpoint's), None where nothing is trained."""
        return self.runs[0]["model"] if self.runs else None


@dataclass
class Benchmarks(StageResult):
    """The benchmark stage. World: the test ``sets`` and their ``keys``, the eval prefix ``store``,
    each encoder's embeddings ``emb``, ID-Sim's per training seed ``idsim_emb``, the metrics
    ``results`` (ID-Sim: seed means) and ``labels``. Released: ``scores``
    (:class:`~nearid_lib.idsim.released.ReleasedScores`) and what is ``not_scored``, with why."""

    table: pd.DataFrame | None = None
    sets: dict[str, pd.DataFrame] | None = None
    keys: list[str] | None = None
    store: PrefixStore | None = None
    emb: dict[str, dict] | None = None
    idsim_emb: dict[int, dict] | None = None
    results: dict[str, dict] | None = None
    labels: dict[str, tuple[str, str]] | None = None
    scores: ReleasedScores | None = None
    not_scored: dict[str, str] = field(default_factory=dict)


@dataclass
class PatchEmbeddings(StageResult):
    """The patch-embedding stage (Table 2b): its ``table`` and the ID-Sim trained without the patch
    loss (``no_patch``, ``lam = 0``; None where nothing is trained)."""

    table: pd.DataFrame | None = None
    no_patch: Any = None


@dataclass
class Ablations(StageResult):
    """The training ablations: ``by_table`` (paper table key -> its table; empty where nothing is
    trained)."""

    by_table: dict[str, pd.DataFrame] = field(default_factory=dict)


def _nearid_head(profile: str, absent: str):
    """Notebook 03's NearID head (None when its checkpoint is absent), saying which."""
    nearid_dir = checkpoint_dir(profile) / "nearid"
    nearid = load_encoder("nearid", checkpoint=nearid_dir)[0] if nearid_dir.exists() else None
    print("NearID head:", nearid_dir if nearid is not None else f"absent (run notebook 03) - {absent}")
    return nearid


# ----------------------------------------------------------------------------- LoRA placement
def choose_lora_placement(run: Run, cfg: Profile, data: NearIDData | None) -> LoraPlacement:
    """The LoRA placement, chosen on val. World: the prefix caches and the notebook's
    :class:`~nearid_lib.idsim.train.TrainedRuns` (``cache_dir(profile)/idsim``); with
    ``idsim.adapt_stages_choices`` each candidate is trained and scored on val
    (:func:`~nearid_lib.idsim.ablations.choose_placement`), ``09_idsim_lora_placement`` written
    and the chosen placement set in the returned ``cfg``. Released: the table is skipped where
    the profile has choices (it needs training)."""
    if not trains_here(cfg):
        _skip_world_only(run, cfg, [PLACEMENT_OUTPUT])
        return LoraPlacement(cfg=cfg)
    if data is None:
        raise ValueError("idsim.source = 'world' trains ID-Sim on the profile's dataset: pass it as data")
    root = cache_dir(run.profile) / "idsim"
    out = LoraPlacement(cfg=cfg, train_prefix=root / f"train_prefix_s{run.seed}",
                        val_prefix=root / f"val_prefix_s{run.seed}")
    # a recipe and seed trained in one stage is reused by the others, and a rerun loads the finished ones
    out.trained = TrainedRuns(root / "runs", store_path=out.train_prefix)
    if cfg.idsim.adapt_stages_choices:
        placement = choose_placement(cfg, data, train_store_path=out.train_prefix, eval_store_path=out.val_prefix,
                                     log=_silent, trained=out.trained)
        run.write_table(placement.table.assign(profile=run.profile), PLACEMENT_OUTPUT)
        out.cfg, out.table = placement.profile, placement.table
        out.tables.append(placement.table)
    print("LoRA placement:", placement_label(out.cfg.idsim.adapt_stages))
    return out


# ----------------------------------------------------------------------------- training
def loss_curve_figure(history: pd.DataFrame, profile: str):
    """ID-Sim's training losses (total, CLS, patch; rolling mean over 5 steps) per optimizer step."""
    fig, ax = plt.subplots(figsize=(5, 3))
    for col in ("loss", "cls", "patch"):
        ax.plot(history.step, history[col].rolling(5, min_periods=1).mean(), label=col)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (rolling mean 5)")
    ax.set_title(f"ID-Sim training ({profile})")
    ax.legend()
    fig.tight_layout()
    return fig


def train_models(run: Run, cfg: Profile, data: NearIDData | None, placement: LoraPlacement) -> TrainedModels:
    """World: ID-Sim trained for ``idsim.n_seeds`` seeds over one prefix cache
    (:func:`~nearid_lib.idsim.train.train_idsim_seeds`, finished runs reused); the first seed saved
    as ``checkpoint_dir(profile)/idsim``, the others beside it (``seeds/seed<k>``); its history and
    triplets in the notebook's results; the loss curve saved as figure ``09_idsim_loss``.
    Released: nothing is trained (no figure)."""
    if not trains_here(cfg):
        print(f"ID-Sim is not trained here (idsim.source = {cfg.idsim.source!r}): "
              f"{not_scored(cfg)['ID-Sim (trained here)']}")
        return TrainedModels()
    runs = train_idsim_seeds(cfg, data, store_path=placement.train_prefix, trained=placement.trained)
    res = runs[0]
    model, hist, trip = res["model"], res["history"], res["triplets"]
    seeds = [r["seed"] for r in runs]
    ckpt = save_idsim(model, checkpoint_dir(run.profile) / "idsim",
                      extra={"profile": run.profile, "seed": run.seed, "seeds": seeds, "n_steps": res["n_steps"],
                             "n_triplets": len(trip), "timings": res["timings"]})
    for r in runs[1:]:
        save_idsim(r["model"], seed_checkpoint_dir(ckpt, r["seed"]),
                   extra={"profile": run.profile, "seed": r["seed"], "n_steps": r["n_steps"], "timings": r["timings"]})
    write_csv(hist, run.results / "history.csv")
    write_csv(trip, run.results / "triplets.csv")
    figure = run.figure(loss_curve_figure(hist, run.profile), "09_idsim_loss")
    return TrainedModels(tables=[trip.groupby(["subset", "neg_kind"]).size(), (res["timings"], ckpt)],
                         figures=[figure], runs=runs, checkpoint=ckpt)


# ----------------------------------------------------------------------------- benchmarks
def score_benchmarks(run: Run, cfg: Profile, data: NearIDData | None, training: TrainedModels) -> Benchmarks:
    """``09_idsim_benchmarks`` and its bar figure. World: the mini benchmark analogues on the test
    split for the frozen backbone, ID-Sim (mean over its training seeds), the NearID head (when
    notebook 03's checkpoint exists), the colour-histogram floor and the backbone at random init
    (chance, ``09_chance``). Released: the public benchmarks (Subjects2k, DreamBench++) with every
    scorer that needs no training (:func:`~nearid_lib.idsim.released.score_released`); the table is
    skipped, with the reason, when none could be scored."""
    if not trains_here(cfg):
        return _released_benchmarks(run, cfg)
    profile, seed, model, runs = run.profile, run.seed, training.model, training.runs
    sets = mini_benchmark_sets(data, cfg, "test", seed=seed)
    keys = bench_keys(sets)
    nearid = _nearid_head(profile, "skipped")
    store = PrefixStore(model, data, n_variants=0, seed=seed, path=cache_dir(profile) / "idsim" / f"eval_prefix_s{seed}")
    emb = embed_encoders(model, store, keys, nearid=nearid)
    # ID-Sim of every training seed (the same frozen prefix, so the same cache)
    idsim_emb = {seed: emb["idsim"], **{r["seed"]: model_embeddings(r["model"], store, keys)["cls"] for r in runs[1:]}}
    # the pixel-space floor ("colour_hist") and chance ("random": the backbone, never trained), one image load
    emb.update(baseline_embeddings(cfg, data, keys, seed=seed))
    store.save()
    results = {enc: evaluate_sets(sets, e) for enc, e in emb.items()}
    results["idsim"], idsim_sd = seed_mean({s: evaluate_sets(sets, e) for s, e in idsim_emb.items()})
    labels = encoder_labels(cfg)
    table = benchmark_table(results, labels, profile, seeds={"idsim": (len(idsim_emb), idsim_sd)})
    run.write_table(table, "09_idsim_benchmarks")
    # the frozen backbone beside its class at random init (the report lists where chance reaches it)
    run.write_table(chance_check(table, "model", labels["frozen"][0], labels["random"][0], ["value"],
                                 "ID-Sim benchmarks", by=["benchmark", "metric_id"]), "09_chance")
    # the frozen backbone stands in for the paper's DINOv3 row: labelled as what it is
    shown = table.assign(model=table.model.replace({"DINOv3": f"frozen {cfg.idsim.backbone} (paper: DINOv3)"}))
    fig = metric_bars(shown, "metric_id", "model", "value", labels=METRIC_LABELS,
                      title=f"ID-Sim benchmark analogues ({profile} world, test split)")
    return Benchmarks(tables=[table.pivot(index=["benchmark", "metric_id"], columns="model", values="value")],
                      figures=[run.figure(fig, "09_idsim_benchmarks")], table=table, sets=sets, keys=keys,
                      store=store, emb=emb, idsim_emb=idsim_emb, results=results, labels=labels)


def _no_benchmark_reason(cfg: Profile, skipped: dict[str, str]) -> str:
    """Why no public benchmark could be scored (the reason of the skipped benchmark and MLLM tables)."""
    why = "; ".join(skipped[k] for k in ("Subjects2k", "DreamBench++") + tuple(cfg.idsim.frozen_rows) if k in skipped)
    return f"no public ID-Sim benchmark could be scored: {why}"


def _released_benchmarks(run: Run, cfg: Profile) -> Benchmarks:
    """:func:`score_benchmarks` in the released source."""
    nearid = _nearid_head(run.profile, "no NearID row")
    scores = score_released(cfg, nearid=nearid)
    skipped = not_scored(cfg, scores)
    for what, why in skipped.items():
        print(f"not scored - {what}: {why}")
    out = Benchmarks(scores=scores, not_scored=skipped)
    if not (scores.any_benchmark and scores.results):
        run.skip_table("09_idsim_benchmarks", _no_benchmark_reason(cfg, skipped))
        return out
    out.table = released_table(scores, run.profile)
    run.write_table(out.table, "09_idsim_benchmarks", not_scored=skipped)
    out.tables.append(out.table.pivot(index=["benchmark", "metric_id"], columns="model", values="value"))
    fig = metric_bars(out.table, "metric_id", "model", "value", labels=METRIC_LABELS, xlim=None, xlabel="score",
                      title=f"ID-Sim public benchmarks ({run.profile}; {scores.n_s2k} Subjects2k / "
                            f"{scores.n_dbpp} DreamBench++ pairs)")
    out.figures.append(run.figure(fig, "09_idsim_benchmarks"))
    return out


# ----------------------------------------------------------------------------- Table 2b
def patch_embeddings(run: Run, cfg: Profile, data: NearIDData | None, placement: LoraPlacement,
                     training: TrainedModels, bench: Benchmarks) -> PatchEmbeddings:
    """``09_idsim_patch`` (Table 2b). World: the aggregated patch embeddings of the frozen backbone,
    of ID-Sim trained without the patch loss (``lam = 0``, the same seed; Supp. Table 8's CLS-only
    row, trained once) and of ID-Sim, on the mini benchmarks. Released: the frozen backbone's and
    the released ID-Sim's on the public benchmarks (``ours_no_patch`` is not released); skipped when
    neither was scored."""
    if not trains_here(cfg):
        return _released_patch(run, cfg, bench)
    res, model, store, sets, keys = training.runs[0], training.model, bench.store, bench.sets, bench.keys
    no_patch = placement.trained.train(row_profile(cfg, {"lam": 0.0}, run.seed), data, store=res["store"],
                                       log=_silent)["model"]
    patch_emb = model_embeddings(model, store, keys, kinds=("patch", "frozen_patch"))
    no_patch_emb = model_embeddings(no_patch, store, keys, kinds=("patch",))["patch"]   # same prefix cache
    patch = patch_table({"dinov3": evaluate_sets(sets, patch_emb["frozen_patch"]),
                         "ours_no_patch": evaluate_sets(sets, no_patch_emb),
                         "ours": evaluate_sets(sets, patch_emb["patch"])}, run.profile)
    run.write_table(patch, "09_idsim_patch")
    return PatchEmbeddings(tables=[patch], table=patch, no_patch=no_patch)


def _released_patch(run: Run, cfg: Profile, bench: Benchmarks) -> PatchEmbeddings:
    """:func:`patch_embeddings` in the released source."""
    scores, skipped = bench.scores, bench.not_scored
    patch = released_patch_table(scores, run.profile) if scores.any_benchmark else None
    if patch is None:
        run.skip_table("09_idsim_patch", f"the frozen {cfg.idsim.backbone} patch column needs the backbone and a "
                                         f"public benchmark: {skipped.get(cfg.idsim.backbone, '')} "
                                         f"{skipped.get('Subjects2k', '')} {skipped.get('DreamBench++', '')}")
        return PatchEmbeddings()
    gone = "ours_no_patch" if "ours" in patch.columns else "ours_no_patch, ours"
    run.write_table(patch, "09_idsim_patch", not_scored=skipped, not_produced={gone: skipped[RELEASE_KEY]})
    return PatchEmbeddings(tables=[patch], table=patch)


# ----------------------------------------------------------------------------- Table 2a
def mllm_comparison(run: Run, cfg: Profile, data: NearIDData | None, bench: Benchmarks) -> StageResult:
    """``09_idsim_mllm`` (Table 2a): the concept-preservation columns of every embedding and, when
    ``idsim.mllm_judge`` names one, an MLLM judge prompted for instance identity (its answers in the
    notebook's ``mllm_answers.csv``). World: on the graded edit-grid pairs, the embeddings re-scored
    on the judged pairs. Released: on the public benchmarks, with the datasets' own GPT-4o
    annotations as ``MLLM*``; skipped when no public benchmark could be scored."""
    if not trains_here(cfg):
        return _released_mllm(run, cfg, bench)
    results, labels, emb = bench.results, bench.labels, bench.emb
    mllm_results = dict(results)
    mllm_labels = {enc: ({"idsim": "Ours (ViT-L)"}.get(enc, ""), labels[enc][1]) for enc in results}
    if cfg.idsim.mllm_judge:
        judge = idsim_judge(cfg.idsim.mllm_judge)
        mllm_results["judge"], judged = judge_graded(judge, bench.sets["graded"], data.image,
                                                     max_pairs=cfg.idsim.mllm_max_pairs)
        mllm_labels["judge"] = ("", f"MLLM judge {judge.name}, identity prompt (coverage "
                                    f"{mllm_results['judge']['coverage']:.0%})")
        write_csv(judged, run.results / "mllm_answers.csv")
        for enc in ("idsim", "frozen"):
            mllm_results[f"{enc}@judged"] = {**evaluate_sets({"graded": judged}, emb[enc]), "n_pairs": len(judged)}
            mllm_labels[f"{enc}@judged"] = ("", f"{labels[enc][1]} on the judged pairs")
    mllm = mllm_table(mllm_results, mllm_labels, run.profile)
    run.write_table(mllm, "09_idsim_mllm")
    return StageResult(tables=[mllm])


def _released_mllm(run: Run, cfg: Profile, bench: Benchmarks) -> StageResult:
    """:func:`mllm_comparison` in the released source."""
    scores, skipped = bench.scores, bench.not_scored
    if not (scores.any_benchmark and scores.results):
        run.skip_table("09_idsim_mllm", _no_benchmark_reason(cfg, skipped))
        return StageResult()
    mllm = released_mllm_table(scores, run.profile)
    run.write_table(mllm, "09_idsim_mllm", not_scored=skipped)
    if scores.answers is not None and len(scores.answers):
        write_csv(scores.answers, run.results / "mllm_answers.csv")
    return StageResult(tables=[mllm])


# ----------------------------------------------------------------------------- Table 2c
def persam_segmentation(run: Run, cfg: Profile, data: NearIDData | None, training: TrainedModels,
                        bench: Benchmarks, patch: PatchEmbeddings) -> StageResult:
    """``09_idsim_persam`` (Table 2c). World: PerSAM's feature-driven steps with the patch tokens of
    the frozen backbone, ID-Sim without the patch loss and ID-Sim, on the test identities' queries
    (:func:`~nearid_lib.idsim.persam.mini_persam_queries`; predictions in the notebook's
    ``persam_predictions.csv``). Released: skipped (PODS's evaluation protocol is not published)."""
    if not trains_here(cfg):
        _skip_world_only(run, cfg, ["09_idsim_persam"])
        return StageResult()
    model, store = training.model, bench.store
    queries = mini_persam_queries(data, "test", seed=run.seed)
    pkeys = list(dict.fromkeys(queries.reference.tolist() + queries["query"].tolist()))
    tok_sets = {"dinov3": token_maps(model, store, pkeys, frozen=True), "ours": token_maps(model, store, pkeys),
                "ours_no_patch": token_maps(patch.no_patch, store, pkeys)}
    predictor = mask_predictor(cfg.idsim.persam_sam)
    seg, seg_preds = persam_benchmark(queries, {k: dict(zip(pkeys, v)) for k, v in tok_sets.items()},
                                      data.image, data.mask, predictor)
    write_csv(seg_preds, run.results / "persam_predictions.csv")
    persam = persam_table(seg, {"dinov3": f"frozen {cfg.idsim.backbone} tokens", "ours_no_patch": "ID-Sim, lam = 0",
                                "ours": "ID-Sim"}, predictor.name, run.profile)
    run.write_table(persam, "09_idsim_persam")
    return StageResult(tables=[persam])


# ----------------------------------------------------------------------------- ablations
def training_ablations(run: Run, cfg: Profile, data: NearIDData | None, placement: LoraPlacement) -> Ablations:
    """The training ablations of ``idsim.ablation_tables`` (Table 3, Supp. Tables 5-9), one table
    each (:data:`~nearid_lib.idsim.ablations.OUTPUTS`). World: every row trained
    (:func:`~nearid_lib.idsim.ablations.ablation_runs`, finished runs reused; the per-run scores in
    the notebook's ``ablation_runs.csv``) and scored on val. Released: each table skipped (it needs
    training)."""
    if not trains_here(cfg):
        _skip_world_only(run, cfg, [OUTPUTS[key] for key in cfg.idsim.ablation_tables])
        return Ablations()
    trained = placement.trained
    abl_runs = ablation_runs(cfg, data, list(cfg.idsim.ablation_tables), train_store_path=placement.train_prefix,
                             eval_store_path=placement.val_prefix, log=_silent, trained=trained)
    write_csv(abl_runs.drop(columns="units"), run.results / "ablation_runs.csv")
    by_table = {key: ablation_table(abl_runs, key, seed=run.seed) for key in cfg.idsim.ablation_tables}
    for key, t in by_table.items():
        run.write_table(t.assign(profile=run.profile), OUTPUTS[key])
    print(f"ID-Sim trainings in this notebook: {trained.trained} run, {trained.reused} reused "
          f"({trained.loaded} of them loaded from an earlier run)")
    return Ablations(tables=[pd.concat(by_table.values(), keys=list(by_table), names=["table"])], by_table=by_table)


# ----------------------------------------------------------------------------- claims
def idsim_claims(run: Run, cfg: Profile, bench: Benchmarks, ablations: Ablations,
                 persam: StageResult | None = None) -> StageResult:
    """``claims_09_idsim``. World: ID-Sim vs its frozen backbone (:data:`~nearid_lib.idsim.claims.IDSIM_CLAIMS`
    of this notebook, paired bootstrap over test units and training seeds), the count of mini
    metrics won, Table 2c's PerSAM comparison (``persam``, the PerSAM stage's table: ID-Sim's patch
    tokens against the frozen backbone's, mAP point values: PerSAM's mAP ranks every query at once,
    so it has no per-unit outcomes to resample) and the ablation claims. Released: the released ID-Sim vs the frozen backbone on the
    public benchmarks (:data:`~nearid_lib.idsim.claims.RELEASED_CLAIMS`); skipped when the two were
    not both scored."""
    rng = make_rng(run.seed, "claims", "09")
    if not trains_here(cfg):
        evidence = released_evidence(bench.scores, cfg.idsim.backbone)
        if not evidence:
            skipped = bench.not_scored
            run.skip_table("claims_09_idsim", "the released ID-Sim and the frozen backbone were not both scored on a "
                                              f"public benchmark: {skipped.get(RELEASE_KEY, '')} "
                                              f"{skipped.get(cfg.idsim.backbone, '')}")
            return StageResult()
        claims = evaluate_claims(RELEASED_CLAIMS, evidence, rng, profile=run.profile)
        run.write_claims(claims, "09_idsim", source="the released ID-Sim vs frozen DINOv3, public benchmarks")
        return StageResult(tables=[claims[["claim", "ours", "verdict"]]])
    sets, emb = bench.sets, bench.emb
    evidence = {**benchmark_evidence(sets, {"frozen": emb["frozen"]}),
                **pool_seeds({s: benchmark_evidence(sets, {"idsim": e}) for s, e in bench.idsim_emb.items()})}
    claims = evaluate_claims(IDSIM_CLAIMS, evidence, rng, profile=run.profile, keys=CLAIMS_BY_NOTEBOOK[NOTEBOOK])
    frozen, idsim = bench.results["frozen"], bench.results["idsim"]
    wins = [m for m in frozen if idsim[m] > frozen[m]]
    rows = [claim("ID-Sim beats the frozen backbone on the mini benchmarks (all metrics, point values)",
                  "48/49 setups won", f"{len(wins)}/{len(frozen)} metrics won", len(wins) == len(frozen),
                  detail="won: " + ", ".join(wins), profile=run.profile)]
    for table in (persam.tables if persam is not None else []):
        by = table.set_index("method")["map"]
        rows.append(claim("ID-Sim's patch features improve personalized segmentation over its frozen backbone's "
                          "(PerSAM, Table 2c mAP, point values)", "DINOv3 0.153 -> ID-Sim 0.436 mAP",
                          f"frozen {by['PerSAM + DINOv3']:.3f} -> ID-Sim {by['PerSAM + Ours']:.3f} mAP",
                          by["PerSAM + Ours"] > by["PerSAM + DINOv3"],
                          detail="PerSAM's feature-driven steps on the test identities' queries (ID-Sim Sec. 4.3: "
                                 "'our patch features improve segmentation mAP significantly from 0.153 to 0.436')",
                          profile=run.profile))
    rows += ablation_claims(ablations.by_table, run.profile)
    claims = pd.concat([claims, pd.DataFrame(rows)], ignore_index=True)
    run.write_claims(claims, "09_idsim")
    return StageResult(tables=[claims[["claim", "ours", "verdict"]]])
