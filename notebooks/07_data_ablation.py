# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 - Training data ablation (NearID Table 6)
# L_NearID with NearID + MTG (default), NearID only, MTG only, and one NearID source only (no MTG).
# Same step budget (`train.ablation_steps`) for every head; test split over all sources.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import pandas as pd

from nearid_lib.claims import claim
from nearid_lib.config import get_profile
from nearid_lib.nearid.embedder import Embedder
from nearid_lib.nearid.evaluate import evaluate_split
from nearid_lib.nearid.sweep import ablation_inputs, train_and_score
from nearid_lib.report import paper_values_dir
from nearid_lib.run import start_run

run = start_run(PROFILE, SEED, "07_data_ablation")
cfg = run.cfg
data, backbone, steps = ablation_inputs(cfg)       # steps: the same budget for every head
paper6 = pd.read_csv(paper_values_dir() / "nearid_table6_data_ablation.csv")
one = data.train_sources[0]
variants = [
    ("nearid_full", "NearID + MTG", {}, len(data.train_sources), True),
    ("nearid_only", "NearID only", {"train.use_mtg": False}, len(data.train_sources), False),
    ("mtg_only", "MTG only", {"train.use_nearid": False}, 0, True),
    ("nearid1_only", f"NearID source '{one}' only", {"train.use_mtg": False, "train.sources": (one,)}, 1, False),
]

# %%
frozen = evaluate_split(Embedder(backbone, data, profile=PROFILE, store_tokens=True), data, "test")
rows = [{"row_id": "frozen", "ours_label": f"{backbone.name} GAP (frozen)", "nearid_src": None, "mtg_used": None,
         **frozen}]
for rid, label, over, n_src, mtg in variants:
    c = get_profile(PROFILE, seed=SEED, **{"train.loss": "nearid", "train.max_steps": steps, **over})
    r = train_and_score(c, data, backbone, splits=("test",), label=rid, progress=True)
    rows.append({"row_id": rid, "ours_label": f"{label} ({steps} steps)", "nearid_src": n_src, "mtg_used": mtg,
                 **r["test"]})
    print(f"{rid:14s} SSR {r['test']['nearid_ssr']:6.1f} unseen {r['test']['unseen_ssr']:6.1f} "
          f"M-O {r['test']['mtg_mo']:.3f} MTG SSR {r['test']['mtg_ssr']:.1f}")
t6 = pd.DataFrame(rows).merge(paper6[["row", "row_id", "role"]], on="row_id", how="left")
t6 = t6[["row", "row_id", "ours_label", "nearid_src", "mtg_used", "nearid_ssr", "nearid_pa", "mtg_mo", "mtg_mopair",
         "mtg_ssr", "mtg_pa", "train_ssr", "unseen_ssr", "unseen_pa"]]
run.write_table(t6, "07_table6_data_ablation")
t6.round(3)

# %%
by = t6.set_index("row_id")
claims = [
    claim("MTG only discriminates NearID distractors far worse than NearID data", "58.3 vs 99.2 SSR",
          f"{by.loc['mtg_only', 'nearid_ssr']:.1f} vs {by.loc['nearid_full', 'nearid_ssr']:.1f}",
          bool(by.loc["mtg_only", "nearid_ssr"] < by.loc["nearid_full", "nearid_ssr"]), "test split", PROFILE),
    claim("One NearID source generalises worse than all training sources", "86.9 vs 98.4 SSR (no MTG)",
          f"{by.loc['nearid1_only', 'nearid_ssr']:.1f} vs {by.loc['nearid_only', 'nearid_ssr']:.1f}",
          bool(by.loc["nearid1_only", "nearid_ssr"] < by.loc["nearid_only", "nearid_ssr"]), "test split", PROFILE),
    claim("Adding MTG improves part-level MTG SSR over NearID only", "35 vs 4",
          f"{by.loc['nearid_full', 'mtg_ssr']:.1f} vs {by.loc['nearid_only', 'mtg_ssr']:.1f}",
          bool(by.loc["nearid_full", "mtg_ssr"] > by.loc["nearid_only", "mtg_ssr"]), "test MTG pairs", PROFILE),
]
run.write_claims(claims, "07_data_ablation")
pd.DataFrame(claims)
