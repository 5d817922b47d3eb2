# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 12 - Every identity encoder on every paper's benchmark
# Each paper scores its own model on its own benchmark; no release scores the others. Here the
# identity models of NearID (the MAP head) and ID-Sim, beside their frozen backbones, are scored on
# NearID-bench (SSR / PA, foreground only, MTG M-O), on ID-Sim's benchmark (the selective
# sensitivity on the edit grids in `mini`; Subjects2k AP and DreamBench++ Spearman in `paper`) and
# on the FPR galleries (gallery mAP, agreement with the true drift), each through the code of the
# notebook that owns it (`nearid_lib.cross_paper`).
#
# `paper`: the released NearID weights and the released ID-Sim (`idsim-release`), our trained head
# when there is one, frozen SigLIP2 and DINOv3. `mini`: our trained NearID head (notebook 03) and
# ID-Sim (notebook 09) on their frozen EfficientNet-Lite0.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
from IPython.display import display

from nearid_lib.cross_paper import cross_paper, plot_cross_paper
from nearid_lib.run import setup_notebook

nb = setup_notebook(PROFILE, SEED, "12_cross_paper")
run, cfg, data = nb.run, nb.cfg, nb.data

# %%
cp = cross_paper(cfg, data, seed=SEED)
for note in cp.notes:
    print("note:", note)
run.write_table(cp.table, "12_cross_paper", notes=cp.notes)
cp.table.round(3)

# %%
display(run.figure(plot_cross_paper(cp.table, f"Every identity encoder on every paper's benchmark ({PROFILE})",
                                    footnote=cp.seed_note), "12_cross_paper"))
