"""NearID-bench evaluation, stage by stage: every table of notebook 04 (Tables 1, 5, 7, DreamBench++
Table 2 / Figure 4, the chance reference, the authors' released DreamBench++ scores, the released
weights' precision, the VLM judges, the evaluation timing, claims 1, 2 and 4).

Each public function is one stage the notebook shows, in the notebook's order::

    nb = setup_notebook(PROFILE, SEED, "04_eval_nearid_bench", backbone=True)
    encoders = load_encoders(nb)                       # the heads of every seed + the frozen encoders
    scores = score_encoders(nb, encoders)              # nearid.bench.run_bench over every encoder
    released = read_released_dbpp(nb)                  # the authors' per-image DreamBench++ scores
    table1 = table1_main(nb, encoders, scores, released)
    ...

A stage writes its table (:meth:`nearid_lib.run.Run.write_table`) where the profile has it and
records it skipped with the reason (:meth:`~nearid_lib.run.Run.skip_table`) where the profile lacks
what it needs, and returns what the notebook displays: the table, or an empty one where it was
skipped. The notebook decides nothing: the same cells run in every profile.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch

from .. import plots
from ..claims import evaluate_claims
from ..io_utils import write_csv, write_json
from ..models import resolve_name
from ..runtime.seeding import make_rng
from .ablations import main_row
from .bench import BenchRun, run_bench
from .claims import CLAIMS_BY_NOTEBOOK, NEARID_CLAIMS
from .dbpp import dbpp_for_profile
from .dbpp_released import RATINGS_WHY, RELEASED_TABLES, released_tables
from .evaluate import EncoderResult, backbone_throughput, n_bench_images, source_groups
from .judges import judge_table
from .release import RELEASE_FLOAT, RELEASE_INT8, decision_diff, release_why
from .scorers import BenchEncoders, load_bench_encoders
from .sweep import RowSpec, Sweep, run_rows
from .tables import (FROZEN_SOURCE_RANGE, chance_table, fig4_dbpp_category, per_seed, seed_mean,
                     source_range_check, table1, table2_dbpp, table5, table7, table7_sweep_row)
from .unscored import absent_baselines, gated_rows, unscored_rows

if TYPE_CHECKING:
    from ..run import NotebookSetup

__all__ = ["BenchEncoderSet", "BenchScores", "ReleasedDBpp", "bench_sources", "load_encoders", "score_encoders",
           "read_released_dbpp", "table1_main", "table5_per_source", "frozen_source_range", "table7_encoders",
           "table7_fg_only", "overview_figure", "chance_reference", "dbpp_table2", "released_dbpp_tables",
           "release_precision", "vlm_judges", "write_pair_scores", "eval_timing", "bench_claims"]

NOTEBOOK = "04_eval_nearid_bench"
# the head trained and tested on foreground-only images (Table 7's ceiling): every role masked, p = 1
FG_TRAINED = RowSpec("fg_trained", "NearID head trained FG-only (ceiling)",
                     {"train.mask_p_anchor": 1.0, "train.mask_p_positive": 1.0, "train.mask_p_distractor": 1.0})
FG_TRAINED_METHOD = "NearID (Ours), trained FG-only (ceiling)"
RELEASED_TABLE1_COLUMNS = ["row", "dbpp_mh", "dbpp_mh_std", "dbpp_mh_all4", "n_object"]
VSM_NOTE = ("from the authors' released per-image scores (dreambench_plus/ratings/data_vsm_rating), "
            "object category")


@dataclass
class BenchEncoderSet:
    """The encoders notebook 04 scores: ``heads``, the main head's sweep row over every training seed
    (notebook 03's runs, reused; the claims' evidence of the heads), and ``encoders``, the bench
    encoders of the profile (the trained head of every seed, the frozen encoders, the judges), whose
    ``gated`` names the asked-for rows that cannot be scored and why."""

    heads: Sweep
    encoders: BenchEncoders

    def listing(self) -> pd.DataFrame:
        """One row per bench encoder: ``name``, ``kind`` (embedding / pairs) and ``label``."""
        return pd.DataFrame([{"name": b.name, "kind": b.kind, "label": b.label} for b in self.encoders],
                            columns=["name", "kind", "label"])


@dataclass
class BenchScores:
    """Every encoder scored over NearID (full image and foreground only), MTG and DreamBench++
    (``bench``, :class:`~nearid_lib.nearid.bench.BenchRun`), and why the profile has no DreamBench++
    human ratings (``dbpp_why``; None where it has them)."""

    bench: BenchRun
    dbpp_why: str | None

    @property
    def results(self) -> list[EncoderResult]:
        """One :class:`~nearid_lib.nearid.evaluate.EncoderResult` per encoder, in order."""
        return self.bench.results

    def summary(self) -> pd.DataFrame:
        """One row per encoder: seconds to score it and its coverage (:meth:`BenchRun.summary`)."""
        return self.bench.summary()


@dataclass
class ReleasedDBpp:
    """The tables computed from the NearID authors' released per-image DreamBench++ scores
    (:func:`~nearid_lib.nearid.dbpp_released.released_tables`, ``{table name: table}``), None where
    the ratings folder is absent (``why`` then says how to get it)."""

    tables: dict[str, pd.DataFrame] | None
    why: str = RATINGS_WHY

    def vsm_values(self) -> dict[str, dict]:
        """VSM's Table 1 DreamBench++ cell (``{"VSM*": {"dbpp_mh", "dbpp_note"}}``) from the released
        scores, the one VSM cell that can be computed; empty without them or without a VSM row."""
        if self.tables is None:
            return {}
        rel1 = self.tables["04_dbpp_released_table1"].set_index("row")
        if "VSM*" not in rel1.index:
            return {}
        return {"VSM*": {"dbpp_mh": float(rel1.at["VSM*", "dbpp_mh"]), "dbpp_note": VSM_NOTE}}


def bench_sources(nb: NotebookSetup) -> pd.DataFrame:
    """The distractor sources of the dataset: one row per source, whether it is a training source
    and the source groups it is pooled in (:func:`~nearid_lib.nearid.evaluate.source_groups`: Table
    5's averages, Table 1's ``main`` pool)."""
    data = nb.data
    groups = source_groups(data.sources, data.train_sources)
    return pd.DataFrame([{"source": s, "training": s in set(data.train_sources),
                          "groups": ", ".join(g for g, members in groups.items() if s in members)}
                         for s in data.sources], columns=["source", "training", "groups"])


def load_encoders(nb: NotebookSetup) -> BenchEncoderSet:
    """The trained heads of every seed (the main row, :func:`~nearid_lib.nearid.sweep.run_rows`:
    notebook 03's runs, reused) and the profile's bench encoders with them
    (:func:`~nearid_lib.nearid.scorers.load_bench_encoders`); the frozen encoder reuses the heads'
    backbone object, so all read the same feature caches."""
    heads = run_rows(nb.cfg, nb.data, nb.backbone, [main_row(nb.cfg)], nb.seeds)
    encoders = load_bench_encoders(nb.cfg, nb.data, checkpoints=[(r.seed, r.directory) for r in heads.runs["nearid"]])
    return BenchEncoderSet(heads, encoders)


def score_encoders(nb: NotebookSetup, encoders: BenchEncoderSet) -> BenchScores:
    """NearID-bench of every encoder in one call (:func:`~nearid_lib.nearid.bench.run_bench`):
    the backbone tokens of every test image cached first, then each encoder scored from the caches
    over NearID, MTG and DreamBench++ (the human ratings of :func:`~.dbpp.dbpp_for_profile` where the
    profile has them, else the procedural stand-in). Prints where DreamBench++ comes from and the
    seconds the caches took."""
    dbpp_fn, dbpp_why = dbpp_for_profile(nb.cfg)     # DreamBench++ human ratings, or why there are none
    print("DreamBench++:", "human ratings" if dbpp_fn else dbpp_why)
    bench = run_bench(encoders.encoders, nb.data, nb.cfg, dbpp=dbpp_fn)
    print(f"caches ready in {bench.cache_seconds:.1f}s")
    return BenchScores(bench, dbpp_why)


def read_released_dbpp(nb: NotebookSetup) -> ReleasedDBpp:
    """The authors' released per-image DreamBench++ scores as tables, when downloaded (any profile)."""
    return ReleasedDBpp(released_tables(nb.run.profile))


def table1_main(nb: NotebookSetup, encoders: BenchEncoderSet, scores: BenchScores,
                released: ReleasedDBpp) -> pd.DataFrame:
    """NearID Table 1 (``04_table1_main``, written): the seed mean of
    :func:`~nearid_lib.nearid.tables.table1` over the training seeds, on the dataset's split record,
    with the rows this run cannot score appended empty with the reason (VSM, whose DreamBench++ cell
    comes from the released scores when downloaded, every gated encoder, and the paper's CLIP and
    DINOv2 baselines where the profile does not score them)."""
    split = nb.data.manifest.get("split")      # the released data's partition (official, or our rule: flagged)
    t1 = seed_mean([table1(rs, scores.bench.groups, nb.run.profile, split=split) for _, rs in per_seed(scores.results)],
                   ["row"])
    unscored = {**gated_rows(encoders.encoders.gated, "row"), **absent_baselines(nb.cfg.eval.encoders, "row")}
    t1 = unscored_rows(t1, "row", unscored, nb.run.profile, values=released.vsm_values())
    nb.run.write_table(t1, "04_table1_main", seeds=nb.seeds)
    return t1


def table5_per_source(nb: NotebookSetup, scores: BenchScores) -> pd.DataFrame:
    """NearID Table 5 (``04_table5_per_source``, written; long format: one row per source and
    method, seed means): :func:`~nearid_lib.nearid.tables.table5`."""
    t5 = seed_mean([table5(rs, scores.bench.groups, nb.run.profile) for _, rs in per_seed(scores.results)],
                   ["source", "method"])
    nb.run.write_table(t5, "04_table5_per_source", seeds=nb.seeds)
    return t5


def frozen_source_range(nb: NotebookSetup, table5_rows: pd.DataFrame) -> pd.DataFrame:
    """The frozen row's SSR per source against the paper's frozen range (``04_source_range``,
    written: :func:`~nearid_lib.nearid.tables.source_range_check`); prints the sources outside it."""
    source_range = source_range_check(table5_rows)
    nb.run.write_table(source_range, "04_source_range")
    print(f"sources outside the paper's frozen range {FROZEN_SOURCE_RANGE}:",
          ", ".join(source_range.loc[source_range["inside"].eq(False), "source"]) or "none")
    return source_range


def table7_encoders(nb: NotebookSetup, scores: BenchScores) -> pd.DataFrame:
    """NearID Table 7's rows of the bench encoders (full image vs foreground only, seed means:
    :func:`~nearid_lib.nearid.tables.table7`); :func:`table7_fg_only` completes and writes it."""
    return seed_mean([table7(rs, scores.bench.groups, nb.run.profile) for _, rs in per_seed(scores.results)],
                     ["method"])


def table7_fg_only(nb: NotebookSetup, encoders: BenchEncoderSet, table7_rows: pd.DataFrame) -> pd.DataFrame:
    """NearID Table 7 (``04_table7_fg_only``, written): ``table7_rows`` (:func:`table7_encoders`)
    plus the ceiling, a head trained and tested on foreground-only images (every training slot's
    background blacked out, trained here for every seed), plus the gated encoders' rows, empty with
    the reason."""
    ceiling = run_rows(nb.cfg, nb.data, nb.backbone, [FG_TRAINED], nb.seeds)
    t7 = pd.concat([table7_rows, table7_sweep_row(ceiling, FG_TRAINED.key, FG_TRAINED_METHOD)], ignore_index=True)
    unscored = {**gated_rows(encoders.encoders.gated, "method"), **absent_baselines(nb.cfg.eval.encoders, "method")}
    t7 = unscored_rows(t7, "method", unscored, nb.run.profile)
    nb.run.write_table(t7, "04_table7_fg_only", seeds=nb.seeds)
    return t7


def overview_figure(nb: NotebookSetup, table1_rows: pd.DataFrame, table5_rows: pd.DataFrame,
                    table7_rows: pd.DataFrame):
    """Tables 1, 5 and 7 at a glance (:func:`nearid_lib.plots.bench_overview`) over their scored
    rows (the rows empty with a reason left out); the notebook saves it with ``run.figure``."""
    return plots.bench_overview(table1_rows[table1_rows["why_empty"] == ""], table5_rows,
                                table7_rows[table7_rows["why_empty"] == ""], nb.run.profile)


def chance_reference(nb: NotebookSetup, table1_rows: pd.DataFrame, table7_rows: pd.DataFrame) -> pd.DataFrame:
    """The pretrained frozen backbone beside its class at random init (``04_chance``:
    :func:`~nearid_lib.nearid.tables.chance_table`), written where ``eval.encoders`` has the chance
    row; empty (and no table) without one."""
    chance = chance_table(table1_rows, table7_rows, nb.cfg.eval.encoders, nb.cfg.backbone.name)
    if len(chance):
        nb.run.write_table(chance, "04_chance")
    return chance


def dbpp_table2(nb: NotebookSetup, scores: BenchScores) -> pd.DataFrame:
    """NearID Table 2 (``04_table2_dbpp``) and Figure 4's numbers (``04_fig4_dbpp_per_category``),
    seed means, written where an encoder has DreamBench++ scores (human ratings, or the labelled
    procedural stand-in); where the profile expects human ratings (``eval.dbpp_human``) and has none,
    both are skipped with the reason. Returns Table 2 (empty where there is none)."""
    t2 = seed_mean([table2_dbpp(rs, nb.run.profile).assign(seed=s) for s, rs in per_seed(scores.results)], ["method"])
    f4 = seed_mean([fig4_dbpp_category(rs, nb.run.profile).assign(seed=s) for s, rs in per_seed(scores.results)],
                   ["category"])
    if len(t2):
        nb.run.write_table(t2, "04_table2_dbpp", seeds=nb.seeds)
        nb.run.write_table(f4, "04_fig4_dbpp_per_category", seeds=nb.seeds)
    elif nb.cfg.eval.dbpp_human:          # paper: the ratings were expected; say why they are absent
        nb.run.skip_table("04_table2_dbpp", scores.dbpp_why)
        nb.run.skip_table("04_fig4_dbpp_per_category", scores.dbpp_why)
    return t2


def released_dbpp_tables(nb: NotebookSetup, released: ReleasedDBpp) -> pd.DataFrame:
    """Every table of the released per-image DreamBench++ scores (:data:`RELEASED_TABLES`), written
    where they are downloaded, each skipped with how to get them otherwise. Returns Table 1's DB++
    column per scorer (empty where skipped)."""
    if released.tables is None:
        for name in RELEASED_TABLES:
            nb.run.skip_table(name, released.why)
        return pd.DataFrame(columns=RELEASED_TABLE1_COLUMNS)
    for name, table in released.tables.items():
        nb.run.write_table(table, name)
    return released.tables["04_dbpp_released_table1"][RELEASED_TABLE1_COLUMNS]


def release_precision(nb: NotebookSetup, encoders: BenchEncoderSet, scores: BenchScores) -> pd.DataFrame:
    """The released weights scored both ways, float forward vs the int8 token store
    (``04_release_precision``: :func:`~nearid_lib.nearid.release.decision_diff`, the test decisions
    the two disagree on), written where the profile scores both; else skipped with the reason (the
    released weights' gate, or one scoring path only). Returns the table (empty where skipped)."""
    by_name = {r.name: r for r in scores.results}
    if RELEASE_FLOAT in by_name and RELEASE_INT8 in by_name:
        int8 = next(b for b in encoders.encoders if b.name == RELEASE_INT8)
        precision = decision_diff(by_name[RELEASE_FLOAT], by_name[RELEASE_INT8]).assign(
            profile=nb.run.profile, same_tower=getattr(int8, "same_tower", None))
        nb.run.write_table(precision, "04_release_precision")
        return precision
    nb.run.skip_table("04_release_precision", encoders.encoders.gated.get(RELEASE_FLOAT) or release_why() or
                      f"one scoring path only: {RELEASE_FLOAT} is not among eval.encoders, or this profile scores "
                      f"every head in float (train.token_store={nb.cfg.train.token_store})")
    return pd.DataFrame()


def vlm_judges(nb: NotebookSetup, encoders: BenchEncoderSet, scores: BenchScores) -> pd.DataFrame:
    """Every VLM judge the paper uses or the profile asks for, scored or gated with the reason
    (``04_vlm_judges``, written: :func:`~nearid_lib.nearid.judges.judge_table`)."""
    judges = judge_table(nb.cfg, encoders.encoders, scores.results)
    nb.run.write_table(judges, "04_vlm_judges")
    return judges


def write_pair_scores(nb: NotebookSetup, scores: BenchScores) -> list[Path]:
    """Every encoder's per-pair MTG scores (``mtg_pair_scores.csv`` in the notebook's results, for
    notebook 08's score distributions; only where an encoder has any) and each encoder's coverage and
    seconds (``summary.json``). Returns the paths written."""
    mtg_rows = [pd.DataFrame({"encoder": r.name, "ours_label": r.label, "variant": v, "seed": r.seed, **sc})
                for r in scores.results for v, sc in r.mtg_scores.items() if sc]
    written = []
    if mtg_rows:
        written.append(write_csv(pd.concat(mtg_rows, ignore_index=True), nb.run.results / "mtg_pair_scores.csv"))
    written.append(write_json({r.name: {"coverage": r.coverage, "seconds": r.seconds} for r in scores.results},
                              nb.run.results / "summary.json"))
    return written


def eval_timing(nb: NotebookSetup, encoders: BenchEncoderSet, scores: BenchScores) -> pd.DataFrame:
    """The time to evaluate one checkpoint over all sources (``04_eval_timing``, written): warm (from
    cached backbone tokens: head and metrics, every source, MTG, every variant) as measured for the
    first seed's head, and cold, adding the backbone pass over every image at the throughput measured
    here on a sample; the authors' ~10 minutes per checkpoint on an A100 beside it. No row without a
    trained head among the encoders."""
    head = next((b for b in encoders.encoders if b.name == "nearid"), None)     # the first seed's head
    timing = []
    if head is not None:
        cfg, data, variants = nb.cfg, nb.data, scores.bench.variants
        r = next(x for x in scores.results if x.name == "nearid")
        warm = sum(v for k, v in r.seconds.items() if k.startswith(("nearid_", "mtg_")))
        n_img = n_bench_images(data, cfg.eval.split)
        ips = backbone_throughput(head.embedder, data, n=16 if nb.run.profile != "smoke" else 4)
        timing.append({"encoder": "nearid", "ours_label": head.label,
                       "n_sources": len(data.sources), "n_images_per_variant": n_img, "n_variants": len(variants),
                       "seconds_warm_all_sources": warm,
                       "seconds_warm_per_source": r.seconds.get("nearid_full", float("nan")) / len(data.sources),
                       "backbone_images_per_s": ips,
                       "seconds_cold_estimate": warm + n_img * len(variants) / ips,
                       "seconds_cache_build_this_run": scores.bench.cache_seconds,
                       "device": "cuda" if torch.cuda.is_available() else "cpu",
                       "torch_threads": nb.run.threads, "paper_minutes_a100": 10.0})
    tt = pd.DataFrame(timing)
    nb.run.write_table(tt, "04_eval_timing")
    return tt


def bench_claims(nb: NotebookSetup, encoders: BenchEncoderSet, scores: BenchScores) -> pd.DataFrame:
    """Claims 1, 2 and 4 of :mod:`nearid_lib.nearid.claims` with 95% intervals (``claims_04_eval``,
    written) on the per-identity outcomes of the frozen encoder and of the heads of every seed (paired:
    the same test identities) and the per-pair MTG scores."""
    cfg = nb.cfg
    frozen_res = next(r for r in scores.results if r.name == resolve_name(cfg.backbone.name))
    evidence = {**frozen_res.evidence("frozen", nb.data, cfg.eval.split), **encoders.heads.evidence()}
    claims = evaluate_claims(NEARID_CLAIMS, evidence, make_rng(nb.run.seed, "claims", "04"), profile=nb.run.profile,
                             keys=CLAIMS_BY_NOTEBOOK[NOTEBOOK])
    nb.run.write_claims(claims, "04_eval", seeds=nb.seeds)
    return claims
