# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 07 - Training data ablation (NearID Table 6)
# L_NearID with NearID + MTG (the main head), NearID only, MTG only (MTG upsampled 8x, as in the paper)
# and one NearID source only (no MTG). Same recipe and seeds for every head; test split; mean over seeds.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import pandas as pd

from nearid_lib.claims import evaluate_claims
from nearid_lib.nearid.ablations import data_rows
from nearid_lib.nearid.claims import CLAIMS_BY_NOTEBOOK, NEARID_CLAIMS
from nearid_lib.features import Embedder
from nearid_lib.nearid.evaluate import evaluate_split
from nearid_lib.nearid.sweep import run_rows
from nearid_lib.report import paper_values_dir
from nearid_lib.run import setup_notebook
from nearid_lib.runtime.seeding import make_rng

nb = setup_notebook(PROFILE, SEED, "07_data_ablation", backbone=True)
run, cfg, data, backbone, seeds = nb.run, nb.cfg, nb.data, nb.backbone, nb.seeds
variants = data_rows(cfg, data)

# %%
sweep = run_rows(cfg, data, backbone, [v[0] for v in variants], seeds)

# %%
frozen = {"row_id": "frozen", "ours_label": f"{backbone.name} pooled (frozen)", "nearid_src": None,
          "mtg_used": None, "n_seeds": 1,
          **evaluate_split(Embedder(backbone, data, profile=cfg, store_tokens=True), data, "test")}
t6 = sweep.summary().assign(nearid_src=[v[2] for v in variants], mtg_used=[v[3] for v in variants])
t6 = pd.concat([pd.DataFrame([frozen]), t6], ignore_index=True)
paper6 = pd.read_csv(paper_values_dir() / "nearid_table6_data_ablation.csv")
t6 = t6.merge(paper6[["row", "row_id", "role"]], on="row_id", how="left")
metric_cols = ["nearid_ssr", "nearid_pa", "nearid_pa_strict", "mtg_mo", "mtg_mopair", "mtg_ssr", "mtg_pa"]
sd = [c for c in t6.columns if c.endswith("_sd") and c[:-3] in metric_cols]
t6 = t6[["row", "row_id", "ours_label", "nearid_src", "mtg_used"] + metric_cols + sd
        + ["train_ssr", "unseen_ssr", "unseen_pa", "n_seeds"]]
run.write_table(t6, "07_table6_data_ablation", seeds=seeds)
t6[["row", "nearid_ssr", "nearid_ssr_sd", "mtg_mo", "mtg_ssr", "mtg_ssr_sd"]].round(3)

# %% [markdown]
# ## Claims (training data), with 95% intervals

# %%
claims = evaluate_claims(NEARID_CLAIMS, sweep.evidence(), make_rng(SEED, "claims", "07"), profile=PROFILE,
                         keys=CLAIMS_BY_NOTEBOOK["07_data_ablation"])
run.write_claims(claims, "07_data_ablation", seeds=seeds)
claims[["claim", "paper", "ours", "verdict"]]
