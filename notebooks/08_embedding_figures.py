# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 08 - What the NearID head changes: embeddings, attention, score distributions, examples
# - Figure 5: KernelPCA of positives (circles) and their matched-context distractors (crosses) for
#   the frozen backbone and the NearID head, same KernelPCA rule in both panels.
# - Figure 3 (left): where the head's attention probe looks, on positives and on distractors.
# - Figure 9: empirical CDFs of MTG part-edit scores against the oracle (1 - |part| / |object|).
# - Figures 7 / 8: qualitative NearID and MTG rows with per-image scores relative to the anchor.
# - Figure 4: per-category DB++ alignment radar. In `mini` there are no human ratings: the radar is
#   the **procedural-oracle stand-in** (edit grids), labelled as such.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import numpy as np
import pandas as pd
import torch
from IPython.display import display

from nearid_lib import plots
from nearid_lib.nearid.dbpp import PROCEDURAL_NOTE, dbpp_for_profile, dbpp_standin
from nearid_lib.nearid.figures import ECDF_NOTE, kpca_panels, mtg_ecdf_series, mtg_qualitative, nearid_qualitative
from nearid_lib.nearid.pairs import grid_pairs
from nearid_lib.nearid.scorers import load_bench_encoders
from nearid_lib.run import setup_notebook

# the figures use the embedding encoders only (no VLM judge)
nb = setup_notebook(PROFILE, SEED, "08_embedding_figures", overrides={"eval.vlm_judge": None})
run, cfg, data = nb.run, nb.cfg, nb.data
plots.apply_style()
encoders = {b.name: b for b in load_bench_encoders(cfg, data)}
head = encoders["nearid"]
frozen = next(b for n, b in encoders.items() if n != "nearid")
NAMES = {frozen.name: "Frozen " + frozen.label.split(" (")[0].replace("tiny random-init ", ""), "nearid": "NearID (Ours)"}
split = cfg.eval.split
test = data.positives[data.positives["split"] == split].reset_index(drop=True)
src = data.train_sources[0] if data.train_sources else data.sources[0]
print("frozen:", frozen.label, "| head:", head.label, "| distractor source for the figures:", src)

# %% [markdown]
# ## Figure 5 - KernelPCA of positives vs matched-context distractors

# %%
kp = test[test["img3"] != ""].head(cfg.eval.kpca_ids).reset_index(drop=True)
if len(kp) < cfg.eval.kpca_ids:
    kp = test.head(cfg.eval.kpca_ids).reset_index(drop=True)
dist = data.distractors[src].set_index("id").loc[kp["id"]].reset_index()
panels = kpca_panels({NAMES[b.name]: b for b in (frozen, head)}, kp, dist)
fig = plots.kernel_pca_panels(panels, title=f"KernelPCA (RBF, gamma = 1/median sq. dist.), n={len(kp)} "
                                            f"test identities, distractor source '{src}'")
display(run.figure(fig, "08_fig5_kernel_pca"))

# %% [markdown]
# ## Figure 3 (left) - attention of the MAP probe on positives and distractors
# The head's probe attention (mean over heads) reshaped to the backbone's token grid. The frozen GAP
# baseline weighs every token equally, so its row shows the token-feature norm instead (where the
# frozen features are strongest).

# %%
r0 = kp.iloc[0]
d0 = dist.iloc[0]
cols = [("positive 1", r0["img1"]), ("positive 2", r0["img2"]), (f"distractor 1 ({src})", d0["nimg1"]),
        (f"distractor 2 ({src})", d0["nimg2"])]
tok = head.embedder.tokens([c[1] for c in cols])                      # [4, N, D]
with torch.no_grad():
    _, attn = head.embedder.head.eval()(tok, return_attention=True)   # attn [4, H, N]
g = int(round(tok.shape[1] ** 0.5))
attn_maps = attn.mean(1).reshape(len(cols), g, g).numpy()             # [4, g, g] token grid
norm_maps = tok.norm(dim=-1).reshape(len(cols), g, g).numpy()
fig = plots.attention_overlay_grid([data.image(c[1]) for c in cols],
                                   {"NearID probe attention": list(attn_maps),
                                    "frozen token norm": list(norm_maps)},
                                   [c[0] for c in cols], title=f"Identity {r0['id']}: MAP-head attention ({g}x{g} tokens)")
display(run.figure(fig, "08_fig3_attention"))

# %% [markdown]
# ## Figure 9 - MTG score distributions against the oracle

# %%
series, notes, n_edited = mtg_ecdf_series({NAMES[b.name]: b for b in (frozen, head)}, data, split)
if series:
    print({k: float(np.nanmedian(v)) for k, v in series.items()}, notes)
    fig = plots.ecdf_plot(series, title=f"MTG-like part edits ({n_edited} edited images, split '{split}', "
                                        f"profile {PROFILE}; NearID: the published head, one training seed)",
                          xlabel="identity-preservation score s(original, part-edited)",
                          panels=[[NAMES[frozen.name]], ["NearID (Ours)"]],
                          panel_titles=["(a) frozen backbone", "(b) NearID head"], notes=notes, footnote=ECDF_NOTE)
    display(run.figure(fig, "08_fig9_mtg_ecdf"))

# %% [markdown]
# ## Figure 7 - NearID qualitative rows (scores relative to the anchor; F = frozen, N = NearID)

# %%
srcs2 = (data.sources * 2)[:2]
rows_img, rows_txt = nearid_qualitative(data, kp.head(cfg.eval.qualitative_rows), srcs2, {"F": frozen, "N": head})
fig = plots.score_grid(rows_img, rows_txt, ["anchor", "positive 1", "positive 2"] +
                       [f"distractor ({s})" for s in srcs2],
                       title="NearID-bench: distractors sit in the anchor's own background")
display(run.figure(fig, "08_fig7_nearid_qualitative"))

# %% [markdown]
# ## Figure 8 - MTG qualitative rows (green: object, red: edited part; O = oracle)

# %%
m = data.mtg[data.mtg["split"] == split].head(cfg.eval.qualitative_rows) if data.mtg is not None else pd.DataFrame()
if len(m):
    rows_img, rows_txt, conts = mtg_qualitative(data, m, {"F": frozen, "N": head})
    fig = plots.score_grid(rows_img, rows_txt, ["anchor", "positive", "part edit 1", "part edit 2"],
                           title="MTG-like part edits", contours=conts)
    display(run.figure(fig, "08_fig8_mtg_qualitative"))

# %% [markdown]
# ## Figure 4 - per-category DB++ alignment radar
# Human ratings when the profile has DreamBench++; otherwise the procedural stand-in (categories =
# the drifting context factor of the edit grids), **not human ratings**.

# %%
radar = {}
run_dbpp, dbpp_why = dbpp_for_profile(cfg)
if run_dbpp is not None:
    for b in (frozen, head):
        radar[NAMES[b.name]] = run_dbpp(b)[0]["per_category"].set_index("category")["r"].to_dict()
    kind = "DreamBench++ human ratings"
elif cfg.eval.dbpp_standin:
    gp = grid_pairs(data, split)
    for b in (frozen, head):
        mh, _ = dbpp_standin(b, data, gp)
        if mh is not None:
            radar[NAMES[b.name]] = mh["per_category"].set_index("category")["r"].to_dict()
    kind = (f"{PROCEDURAL_NOTE};\naxes = the factor each edit grid varies, not DreamBench++'s four categories "
            "(the paper profile draws those from the authors' scores: nearid dbpp-mh)")
if radar:
    print(pd.DataFrame(radar))
    fig = plots.radar_plot(radar, title=f"M-H per category\n[{kind}]", reference="NearID (Ours)")
    display(run.figure(fig, "08_fig4_dbpp_radar"))
else:
    print(f"no DB++ data and no stand-in in this profile ({dbpp_why}): radar skipped")

# %%
sorted(p.name for p in run.figures.glob("08_*.png"))
