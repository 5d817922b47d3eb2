# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 01 - Data curation: the NearID-mini world
#
# The papers' data cannot be downloaded offline, so `smoke` and `mini` build a procedural world
# with the *structure* of NearID: identities built from parts, 2-3 positive views per identity on
# different (real-photo / texture) backgrounds, near-identity distractors inpainted into the exact
# background and mask region of each view (several sources = perturbation families and
# render resolutions), MTG-like part edits with exact oracle scores, ID-Sim edit grids, and
# FPR-style galleries. The `paper` profile reads the released datasets (through the hub resolver:
# a local mirror with `NEARID_HUB_DIR`), computes the object masks the release does not ship, splits
# the identities (the authors' split files, or a documented rule) and materialises them into the same
# schema (`nearid_lib.data.released`).

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0
N_SHOW = 6

# %%
import time

import matplotlib.pyplot as plt
from IPython.display import display

from nearid_lib.data import load_nearid, prepare_profile_data
from nearid_lib.data.overview import dataset_stats, gallery_sheet, grid_sheet, identity_sheet, mtg_sheet
from nearid_lib.run import start_run

run = start_run(PROFILE, SEED, "01_data_curation", N_SHOW=N_SHOW)
cfg = run.cfg

# %% [markdown]
# ## Build (or resume) the world / materialise the release, then load it through the validating loader

# %%
t0 = time.time()
root = prepare_profile_data(cfg)
data = load_nearid(root, check_images=20)
print(f"{root} ready in {time.time() - t0:.1f} s (build itself: {data.manifest.get('build_seconds')} s)")
print("counts:", data.manifest["counts"])
print("sources:", data.sources, "| seen in training:", data.train_sources)
data.identities.head()

# %% [markdown]
# ## Identities: positives (different backgrounds) and one distractor per source
# Each distractor sits in the *same* background and mask region as view 1: a frozen encoder
# that looks at the whole image sees it as closer than the true positives.

# %%
test_ids = data.identities[data.identities.split == "test"].id.tolist()[:N_SHOW]
sheet, labels = identity_sheet(data, test_ids)
fig, ax = plt.subplots(figsize=(1.6 * len(labels), 1.7 * len(test_ids)))
ax.imshow(sheet)
ax.set_xticks([2 + (112 + 2) * j + 56 for j in range(len(labels))], labels, rotation=30, fontsize=8)
ax.set_yticks([])
ax.set_title(f"{PROFILE}: test identities (views | near-identity distractors per source)")
display(run.figure(fig, "01_identities_distractors"))

# %% [markdown]
# ## MTG-like part edits (oracle = 1 - |part| / |object|, exact)

# %%
data.mtg[[c for c in ("pair_id", "split", "class_name", "part", "oracle_1", "oracle_2") if c in data.mtg]].head(N_SHOW)

# %%
sheet, labels = mtg_sheet(data, n=min(N_SHOW, len(data.mtg)))
fig, ax = plt.subplots(figsize=(10, 1.7 * min(N_SHOW, len(data.mtg))))
ax.imshow(sheet)
ax.set_xticks([2 + (112 + 2) * j + 56 for j in range(len(labels))], labels, fontsize=8)
ax.set_yticks([])
ax.set_title("part edits: " + (", ".join(f"{p}" for p in data.mtg.part.head(N_SHOW)) if "part" in data.mtg
                                else f"{len(data.mtg)} released MTG pairs"))
display(run.figure(fig, "01_mtg_part_edits"))

# %% [markdown]
# ## ID-Sim edit grids: identity-change strength (rows) x factor level (columns)

# %%
if data.grids is not None:
    anchor = data.grids.anchor_id.iloc[0]
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for ax, grid in zip(axes, ("background", "viewpoint", "lighting")):
        ax.imshow(grid_sheet(data, anchor, grid))
        ax.set_title(f"{grid}: rows = identity change, cols = {grid} change", fontsize=9)
        ax.axis("off")
    display(run.figure(fig, "01_edit_grids"))
else:
    print(f"no edit grids in this profile's data ({cfg.world.source}): ID-Sim's sensitivity data is notebook 10's")

# %% [markdown]
# ## FPR-style galleries: references | gallery images per identity

# %%
if data.fpr_train is not None:
    fig, ax = plt.subplots(figsize=(12, 1.6 * min(N_SHOW, data.fpr_train.name.nunique())))
    ax.imshow(gallery_sheet(data, n_ids=N_SHOW))
    ax.axis("off")
    ax.set_title("FPR galleries: references (left) | disjoint gallery images (right)")
    display(run.figure(fig, "01_fpr_galleries"))
else:
    print(f"no FPR galleries in this profile's data ({cfg.world.source}): notebook 11 builds them from the downloads")

# %% [markdown]
# ## Dataset statistics

# %%
stats = dataset_stats(data)
run.write_table(stats, "01_dataset_stats")
stats[stats.section.isin(["size", "object", "distractor_diff_in_mask", "distractor_diff_outside_mask"])]
