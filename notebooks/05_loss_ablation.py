# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 05 - Loss ablation (NearID Tables 3 and 10)
# Same frozen backbone, same MAP head, same data (NearID + MTG) and the same recipe as the main head
# (steps, schedule, seeds) for every training objective; only the loss differs (the L_NearID row *is*
# the main head of notebook 03). Scored on the test split; every row is the mean over `eval.n_seeds`
# seeds (`*_sd`: spread). Where the paper leaves a loss constant open, the authors' released code sets
# it (`nearid_lib.nearid.losses.compute_loss`). DreamBench++ human ratings exist only in `paper`
# (`dbpp_mh` of every row's head, and `delta_mh` against InfoNCE as in Table 10); in the procedural
# world `dbpp_mh` stays empty, with the reason in `note`.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import pandas as pd

from nearid_lib.claims import evaluate_claims
from nearid_lib.nearid.ablations import loss_rows
from nearid_lib.nearid.claims import CLAIMS_BY_NOTEBOOK, NEARID_CLAIMS
from nearid_lib.nearid.dbpp import dbpp_for_profile
from nearid_lib.features import Embedder
from nearid_lib.nearid.bench import standin_scorer
from nearid_lib.nearid.evaluate import encoder_evidence, evaluate_split
from nearid_lib.nearid.scorers import EmbeddingBenchEncoder
from nearid_lib.nearid.sweep import run_rows
from nearid_lib.report import paper_values_dir
from nearid_lib.run import setup_notebook
from nearid_lib.runtime.seeding import make_rng

nb = setup_notebook(PROFILE, SEED, "05_loss_ablation", backbone=True)
run, cfg, data, backbone, seeds = nb.run, nb.cfg, nb.data, nb.backbone, nb.seeds
rows = loss_rows(cfg)
cols = ["nearid_ssr", "nearid_pa", "nearid_pa_strict", "mtg_mo", "mtg_mopair", "mtg_ssr", "mtg_pa", "dbpp_mh"]

# %%
sweep = run_rows(cfg, data, backbone, rows, seeds)

# %%
frozen_emb = Embedder(backbone, data, profile=cfg, store_tokens=True)
frozen = {"key": "frozen", "row_id": "frozen", "ours_label": f"{backbone.name} pooled (frozen)", "n_seeds": 1,
          **evaluate_split(frozen_emb, data, "test")}
summary = pd.concat([pd.DataFrame([frozen]), sweep.summary()], ignore_index=True)
paper3 = pd.read_csv(paper_values_dir() / "nearid_table3_loss_ablation.csv")
paper10 = pd.read_csv(paper_values_dir() / "nearid_table10_infonce.csv")
ours = summary.merge(paper3[["row", "row_id"]], on="row_id", how="left")
ours["row"] = ours["row"].fillna(ours["row_id"])
dbpp_fn, dbpp_why = dbpp_for_profile(cfg)       # DreamBench++ human ratings (paper) or why not
if dbpp_fn is not None:
    mh = sweep.dbpp(backbone, data, dbpp_fn, cfg)
    mh.loc[len(mh)] = {"key": "frozen", "dbpp_mh": dbpp_fn(EmbeddingBenchEncoder(frozen_emb, backbone.name))[0]["m_h"]}
    ours = ours.drop(columns=["dbpp_mh", "dbpp_mh_sd"], errors="ignore").merge(mh, on="key", how="left")
    ours["note"] = "dbpp_mh: DreamBench++ human ratings"
else:
    ours["dbpp_mh"] = float("nan")
    ours["note"] = "dbpp_mh: " + (dbpp_why if cfg.eval.dbpp_human else "no DreamBench++ human ratings in this profile")
# M-H of every row on the procedural DreamBench++ stand-in (edit grids, NOT human ratings), labelled
# dbpp_mh_procedural: alignment beside discrimination for each loss (issue 38)
standin = standin_scorer(cfg, data)
if standin is not None:
    mhp = sweep.dbpp(backbone, data, standin, cfg, column="dbpp_mh_procedural")
    mhp.loc[len(mhp)] = {"key": "frozen", "dbpp_mh_procedural": standin(EmbeddingBenchEncoder(frozen_emb, backbone.name))[0]["m_h"]}
    ours = ours.merge(mhp, on="key", how="left")
    cols = cols + ["dbpp_mh_procedural"]
sd = [c for c in ours.columns if c.endswith("_sd") and c[:-3] in cols]
table3 = ours[["row", "row_id", "ours_label"] + cols + sd + ["unseen_ssr", "unseen_pa", "n_seeds", "steps", "note"]]
run.write_table(table3, "05_table3_loss_ablation", seeds=seeds)
t10 = table3[table3.row_id.isin(paper10.row_id)].drop(columns=["mtg_ssr", "mtg_pa"])
ref = t10[t10.row_id == "infonce"]                       # Table 10: M-H minus InfoNCE's, none for frozen
others = ~t10.row_id.isin(["frozen", "infonce"])
t10 = t10.assign(delta_mh=(t10.dbpp_mh - (ref.dbpp_mh.iloc[0] if len(ref) else float("nan"))).where(others))
if "dbpp_mh_procedural" in t10:
    t10["delta_mh_procedural"] = (t10.dbpp_mh_procedural - ref.dbpp_mh_procedural.iloc[0]).where(others)
run.write_table(t10, "05_table10_infonce", seeds=seeds)
table3[["row", "nearid_ssr", "nearid_ssr_sd", "nearid_pa", "mtg_mo", "mtg_mo_sd", "mtg_ssr"]].round(3)

# %% [markdown]
# ## Claim 3, with 95% intervals
# InfoNCE without distractors lands between the frozen encoder and L_NearID; distractors in the
# denominator without L_rank (+R neg) discriminate like L_NearID (a comparison the paper makes near the
# 99% ceiling: "not testable" when L_NearID is far from it) but align worse with the MTG oracle.
# Claims 3f-3i judge human alignment (DB++ M-H, Tables 3 and 10): +R neg and Circle lose it, L_NearID
# keeps it; in `mini` on the procedural stand-in's grid anchors (not human ratings), seeds resampled.

# %%
evidence = {**sweep.evidence(), **encoder_evidence("frozen", frozen_emb, data, "test")}
claims = evaluate_claims(NEARID_CLAIMS, evidence, make_rng(SEED, "claims", "05"), profile=PROFILE,
                         keys=CLAIMS_BY_NOTEBOOK["05_loss_ablation"])
run.write_claims(claims, "05_loss_ablation", seeds=seeds)
claims[["claim", "paper", "ours", "verdict"]]
