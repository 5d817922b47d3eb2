# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 04 - NearID-bench: matched-context discrimination, MTG part-level alignment, DB++ alignment
# Every encoder of the profile is scored with the NearID protocol (Section 3.4): for each identity and
# each pair of positive views (i, j), the directed margins s(p_i, p_j) - s(p_i, n_i) and
# s(p_i, p_j) - s(p_j, n_j), where n_i is a near-identity distractor inpainted into p_i's *own*
# background. SSR = share of identities whose every margin is positive; PA = share of positive
# margins, with one more trial per identity (its mean margin positive) as the authors' tables count
# it (the strict share beside it: `*_pa_strict`). Then the MTG-like part-edit pairs (M-O, M-Opair,
# SSR, PA) and DreamBench++ M-H.
#
# Tables written (paper keys, our label in `ours_label`): Table 1 (main), Table 5 (per source),
# Table 7 (full image vs foreground only), Table 2 / Figure 4 numbers (DB++), timing.
#
# In `mini` the frozen backbone is EfficientNet-Lite0 (global average of its last feature map), standing
# in for the paper's frozen SigLIP2 row; the head is the MAP head trained by notebook 03 on its stride-16
# tokens, one head per training seed: trained rows report the mean over seeds with the spread beside it
# (`*_sd`), and every claim carries a 95% bootstrap interval over test identities. DreamBench++
# human ratings do not exist offline: the M-H column is then computed against a **procedural oracle,
# not human ratings** (the world's edit grids, oracle = 1 - identity change) and lives in its own
# column `dbpp_mh_procedural`.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import pandas as pd
import torch
from IPython.display import display

from nearid_lib import plots
from nearid_lib.claims import evaluate_claims
from nearid_lib.io_utils import write_csv, write_json
from nearid_lib.models import resolve_name
from nearid_lib.nearid.ablations import main_row
from nearid_lib.nearid.bench import run_bench
from nearid_lib.nearid.claims import CLAIMS_BY_NOTEBOOK, NEARID_CLAIMS
from nearid_lib.nearid.dbpp import dbpp_for_profile
from nearid_lib.nearid.dbpp_released import RATINGS_WHY, RELEASED_TABLES, released_tables
from nearid_lib.nearid.evaluate import backbone_throughput, n_bench_images, source_groups
from nearid_lib.nearid.judges import judge_table
from nearid_lib.nearid.release import RELEASE_FLOAT, RELEASE_INT8, decision_diff, release_why
from nearid_lib.nearid.scorers import load_bench_encoders
from nearid_lib.nearid.sweep import RowSpec, run_rows
from nearid_lib.nearid.tables import (FROZEN_SOURCE_RANGE, chance_table, fig4_dbpp_category, per_seed, seed_mean,
                                      source_range_check, table1, table2_dbpp, table5, table7, table7_sweep_row)
from nearid_lib.nearid.unscored import gated_rows, unscored_rows
from nearid_lib.run import setup_notebook
from nearid_lib.runtime.seeding import make_rng

nb = setup_notebook(PROFILE, SEED, "04_eval_nearid_bench", backbone=True)
run, cfg, data, backbone, seeds = nb.run, nb.cfg, nb.data, nb.backbone, nb.seeds
groups = source_groups(data.sources, data.train_sources)
print("sources:", data.sources, "| training:", data.train_sources)
print("groups:", groups)

# %% [markdown]
# ## Encoders
# The trained heads of every seed (notebook 03's runs, reused here) and the frozen encoders; the frozen
# encoder reuses the heads' backbone object, so all read the same feature caches.

# %%
main = run_rows(cfg, data, backbone, [main_row(cfg)], seeds)
encoders = load_bench_encoders(cfg, data, checkpoints=[(r.seed, r.directory) for r in main.runs["nearid"]])
for b in encoders:
    print(f"{b.name:>22s}  {b.kind:9s}  {b.label}")

# %% [markdown]
# ## Evaluate every encoder (full image and foreground only)
# One call (`nearid.bench.run_bench`, as `score_encoder` runs it): backbone tokens of every test image
# (positives, every distractor source, MTG), full and FG-only, are cached first (the cold part of an
# evaluation); then each encoder is scored from the caches over NearID, MTG and DreamBench++.

# %%
dbpp_fn, dbpp_why = dbpp_for_profile(cfg)     # DreamBench++ human ratings, or why there are none
print("DreamBench++:", "human ratings" if dbpp_fn else dbpp_why)
bench = run_bench(encoders, data, cfg, dbpp=dbpp_fn)
results, variants, cache_seconds = bench.results, bench.variants, bench.cache_seconds
print(f"caches ready in {cache_seconds:.1f}s")
bench.summary()

# %% [markdown]
# ## Table 1 - main results (percent for SSR/PA, Pearson r for alignment)
# PA is the authors' definition (one more trial per identity, won iff its mean margin is positive: the
# number the paper prints); `nearid_pa_strict` beside it is wins / trials of the directed margins.
# Rows this run cannot score stay in the table, empty, with the reason (`why_empty`): VSM (no public
# code) and any encoder behind a declared gate (a VLM judge without weights or template).

# %%
split = data.manifest.get("split")      # the released data's partition (official, or our rule: flagged)
released = released_tables(PROFILE)     # the authors' per-image DreamBench++ scores, when downloaded
vsm_db = {}
if released is not None:
    rel1 = released["04_dbpp_released_table1"].set_index("row")
    if "VSM*" in rel1.index:
        vsm_db = {"VSM*": {"dbpp_mh": float(rel1.at["VSM*", "dbpp_mh"]), "dbpp_note": "from the authors' released "
                           "per-image scores (dreambench_plus/ratings/data_vsm_rating), object category"}}
t1 = seed_mean([table1(rs, groups, PROFILE, split=split) for _, rs in per_seed(results)], ["row"])
t1 = unscored_rows(t1, "row", gated_rows(encoders.gated, "row"), PROFILE, values=vsm_db)
run.write_table(t1, "04_table1_main", seeds=seeds)
t1

# %% [markdown]
# ## Table 5 - per distractor source, training vs unseen sources
# In `mini` a source is a fill generator (`nearid_lib.data.generators`): a look of its own over the same
# edit kinds for every generator, as the paper's inpainting models are, so the unseen fill group tests new
# generators, not new kinds of change. The `hard` source (one-attribute edits alone) is reported apart,
# in no average.

# %%
t5 = seed_mean([table5(rs, groups, PROFILE) for _, rs in per_seed(results)], ["source", "method"])
run.write_table(t5, "04_table5_per_source", seeds=seeds)
t5.pivot_table(index="source", columns="method", values="ssr", sort=False)

# %% [markdown]
# ### Premise: every source within the paper's frozen range
# The paper's frozen baselines score between 12% and 67% SSR across its sources (E.4). A source whose
# frozen SSR falls outside that range is easier or harder than any of the paper's, and claims about
# unseen generators (2e, 2f) would then test that source's quirk (the report lists this table under
# Table 5).

# %%
source_range = source_range_check(t5)
run.write_table(source_range, "04_source_range")
print(f"sources outside the paper's frozen range {FROZEN_SOURCE_RANGE}:",
      ", ".join(source_range.loc[source_range["inside"].eq(False), "source"]) or "none")
source_range

# %% [markdown]
# ## Table 7 - full image vs foreground only

# %%
t7 = seed_mean([table7(rs, groups, PROFILE) for _, rs in per_seed(results)], ["method"])
t7

# %% [markdown]
# ### The ceiling: a head trained and tested on foreground-only images
# Every training slot has its background blacked out (role-aware masking at p = 1 for every role).
# Its FG-only test SSR is what the frozen features support about object identity with no background at
# all; the gap between it and the main head's full-image SSR separates background leakage from identity
# the frozen features do not carry.

# %%
fg_over = {"train.mask_p_anchor": 1.0, "train.mask_p_positive": 1.0, "train.mask_p_distractor": 1.0}
ceiling = run_rows(cfg, data, backbone, [RowSpec("fg_trained", "NearID head trained FG-only (ceiling)", fg_over)],
                   seeds)
t7 = pd.concat([t7, table7_sweep_row(ceiling, "fg_trained", "NearID (Ours), trained FG-only (ceiling)")],
               ignore_index=True)
t7 = unscored_rows(t7, "method", gated_rows(encoders.gated, "method"), PROFILE)
run.write_table(t7, "04_table7_fg_only", seeds=seeds)
t7[["method", "full_ssr", "full_pa", "fg_ssr", "fg_pa", "delta_ssr", "n_seeds"]].round(1)

# %% [markdown]
# ## Tables 1, 5 and 7 at a glance

# %%
display(run.figure(plots.bench_overview(t1[t1["why_empty"] == ""], t5, t7[t7["why_empty"] == ""], PROFILE),
                   "04_nearid_bench_overview"))

# %% [markdown]
# ## The chance reference
# The backbone's class at a fixed random init (`efficientnet-lite0@random` in `mini`'s `eval.encoders`) is
# scored like every other encoder. Where it reaches the pretrained frozen encoder, the analogue rewards
# something a network that was never trained reads off the pixels (the report lists those metrics).

# %%
chance = chance_table(t1, t7, cfg.eval.encoders, cfg.backbone.name)
if len(chance):
    run.write_table(chance, "04_chance")
chance

# %% [markdown]
# ## DreamBench++ (Table 2, Figure 4 numbers)
# With human ratings (paper profile) the rows are the personalisation methods. Without them, the
# rows are the procedural stand-in, labelled as such in every row.

# %%
t2 = seed_mean([table2_dbpp(rs, PROFILE).assign(seed=s) for s, rs in per_seed(results)], ["method"])
f4 = seed_mean([fig4_dbpp_category(rs, PROFILE).assign(seed=s) for s, rs in per_seed(results)], ["category"])
if len(t2):
    run.write_table(t2, "04_table2_dbpp", seeds=seeds)
    run.write_table(f4, "04_fig4_dbpp_per_category", seeds=seeds)
elif cfg.eval.dbpp_human:          # paper: the ratings were expected; say why they are absent
    run.skip_table("04_table2_dbpp", dbpp_why)
    run.skip_table("04_fig4_dbpp_per_category", dbpp_why)
t2

# %% [markdown]
# ## DreamBench++ from the authors' released per-image scores (any profile)
# The NearID authors publish every scorer's per-image DreamBench++ score (their GitHub release,
# `dreambench_plus/ratings`: GPT-4o, DINOv2, CLIP-I, SigLIP2 mean-pooled and MAP head, VSM,
# Qwen3-VL-30B, NearID) beside the two human rater groups. From them, on a CPU in seconds: Table 2
# (object category, per method r ± half the two groups' difference), Table 1's DB++ column (the
# object category's Fisher-z mean over the 7 methods, as reported) with the Fisher-z mean over the
# four categories beside it, and Figure 4's per-category numbers. `nearid dbpp-mh` computes the
# same for your own metric's per-image scores.

# %%
if released is None:
    for name in RELEASED_TABLES:
        run.skip_table(name, RATINGS_WHY)
else:
    for name, table in released.items():
        run.write_table(table, name)
    display(released["04_dbpp_released_table1"][["row", "dbpp_mh", "dbpp_mh_std", "dbpp_mh_all4", "n_object"]])

# %% [markdown]
# ## The released weights: float forward vs the int8 token store
# The released-weights row is scored as the authors' guide measured its expected values: float32 tower
# and head on the images. Where this profile scores heads from a quantised token store, the released
# head is scored that way too; the table counts the test decisions (margin trials, identities' SSR
# outcomes, MTG pairs) on which the two disagree.

# %%
by_name = {r.name: r for r in results}
if RELEASE_FLOAT in by_name and RELEASE_INT8 in by_name:
    precision = decision_diff(by_name[RELEASE_FLOAT], by_name[RELEASE_INT8]).assign(
        profile=PROFILE, same_tower=getattr(next(b for b in encoders if b.name == RELEASE_INT8), "same_tower", None))
    run.write_table(precision, "04_release_precision")
    display(precision)
else:
    run.skip_table("04_release_precision", encoders.gated.get(RELEASE_FLOAT) or release_why() or
                   f"one scoring path only: {RELEASE_FLOAT} is not among eval.encoders, or this profile scores "
                   f"every head in float (train.token_store={cfg.train.token_store})")

# %% [markdown]
# ## The VLM judges (Table 1's Qwen3-VL row, Table 7's three scales)
# Every judge the profile asks for: scored (its plan over the GPUs, coverage and cost per 1,000 pairs,
# measured here and projected) or behind its gate, with the reason.

# %%
judges = judge_table(cfg, encoders, results)
run.write_table(judges, "04_vlm_judges")
judges

# %% [markdown]
# ## Per-pair MTG scores (for the score distributions of notebook 08)

# %%
mtg_rows = []
for r in results:
    for v, sc in r.mtg_scores.items():
        if sc:
            mtg_rows.append(pd.DataFrame({"encoder": r.name, "ours_label": r.label, "variant": v, "seed": r.seed,
                                          **sc}))
if mtg_rows:
    write_csv(pd.concat(mtg_rows, ignore_index=True), run.results / "mtg_pair_scores.csv")
write_json({r.name: {"coverage": r.coverage, "seconds": r.seconds} for r in results}, run.results / "summary.json")

# %% [markdown]
# ## Time to evaluate one checkpoint over all sources
# Warm = from cached backbone tokens (head + metrics, every source, MTG, full and FG-only). Cold adds
# the backbone pass over every image, measured here as throughput on a sample and extrapolated.
# The authors quote ~10 minutes per checkpoint on an A100 (9 sources + MTG).

# %%
head = next((b for b in encoders if b.name == "nearid"), None)     # the first seed's head
timing = []
if head is not None:
    r = next(x for x in results if x.name == "nearid")
    warm = sum(v for k, v in r.seconds.items() if k.startswith(("nearid_", "mtg_")))
    n_img = n_bench_images(data, cfg.eval.split)
    ips = backbone_throughput(head.embedder, data, n=16 if PROFILE != "smoke" else 4)
    timing.append({"encoder": "nearid", "ours_label": head.label,
                   "n_sources": len(data.sources), "n_images_per_variant": n_img, "n_variants": len(variants),
                   "seconds_warm_all_sources": warm,
                   "seconds_warm_per_source": r.seconds.get("nearid_full", float("nan")) / len(data.sources),
                   "backbone_images_per_s": ips,
                   "seconds_cold_estimate": warm + n_img * len(variants) / ips,
                   "seconds_cache_build_this_run": cache_seconds,
                   "device": "cuda" if torch.cuda.is_available() else "cpu",
                   "torch_threads": run.threads, "paper_minutes_a100": 10.0})
tt = pd.DataFrame(timing)
run.write_table(tt, "04_eval_timing")
tt.T

# %% [markdown]
# ## Claims 1, 2 and 4, with 95% intervals
# Declared once in `nearid_lib.nearid.claims` (criteria fixed before any result). Evidence: the
# per-identity outcomes of the frozen encoder and of the heads of every seed on the test identities
# (paired: the same identities), and the per-pair MTG scores.

# %%
frozen_res = next(r for r in results if r.name == resolve_name(cfg.backbone.name))
evidence = {**frozen_res.evidence("frozen", data, cfg.eval.split), **main.evidence()}
claims = evaluate_claims(NEARID_CLAIMS, evidence, make_rng(SEED, "claims", "04"), profile=PROFILE,
                         keys=CLAIMS_BY_NOTEBOOK["04_eval_nearid_bench"])
run.write_claims(claims, "04_eval", seeds=seeds)
claims[["claim", "paper", "ours", "verdict"]]
