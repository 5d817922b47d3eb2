# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 11 - Finer-Personalization Rank: gallery retrieval instead of pairwise similarity
# Each generated image queries a gallery of visually similar real identities; the protocol's score
# is the mean average precision (mAP) of that ranking (FPR paper, Section 3). We put it beside the
# usual pairwise similarity (CLIP-I / DINO score: the cosine between the generated image and its
# reference).
#
# In `mini`, the procedural world supplies species, identities, reference sets and disjoint
# galleries (`fpr/train_data.csv`, `fpr/gallery_data.csv`), and the personalization "methods" are
# simulated with a **known identity drift** (plus one that copy-pastes the reference, the paper's
# Section 5.1 caveat), so the protocol's verdicts can be checked against the truth. `drift_high`
# keeps the reference's pose and background (the IP-Adapter-Plus behaviour the paper describes).
# Any user's generator is scored the same way: `nearid_lib.fpr.rank_generator(csv_or_folder,
# gallery_csv, encoder=...)`.
#
# Encoders: `efficientnet-lite0` (frozen GAP, the general-purpose role of CLIP/DINO here) and the
# NearID head trained by notebook 03 (the identity-specialised role of MiewID / BioCLIP 2 /
# SP-Cars). CLIP-T is not reported in `mini`: no text encoder is available offline.
#
# In `paper` the nine galleries are built from the published sources (`nearid_lib.fpr.downloads`:
# CUB-200-2011 and WildlifeReID-10k unpacked under `NEARID_DOWNLOADS`, Stanford Cars from the hub
# dataset `Donghyun99/Stanford-Cars`) and the methods' images are generated here with the diffusers
# pipelines the paper configures (DreamBooth on SD3-Medium, IP-Adapter and IP-Adapter-Plus on SDXL,
# FLUX.1 Kontext, Diptych over FLUX.1 Fill; `nearid_lib.fpr.generation`, resumable, shardable with
# `torchrun -m nearid_lib.fpr.generation`), unless the user's own folder
# (`<downloads>/fpr_generated/<method>/<dataset>/<identity>/`) has them: a user folder wins, and is
# the only source of Emu2 and OminiControl. A table whose data or encoder is absent is skipped with
# the reason (what to download, and where), never left empty.
#
# Each stage below is one function of `nearid_lib.fpr.reproduction` over the run's study: it
# computes what the profile has, writes its tables and figures, and returns what the cell shows
# (nothing where the profile does not produce it: those tables are skipped with their reason).

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import time

from IPython.display import display

from nearid_lib.fpr.reproduction import (
    agreement_results,
    background_results,
    chance_results,
    claims_results,
    encoder_table,
    gallery_ablation_results,
    gallery_data,
    main_figures,
    main_results,
    method_sources_table,
    open_study,
    oracle_results,
    per_dataset_results,
    retrieval_list_figures,
    run_protocol,
    sampling_results,
    score_dbpp,
    skipped_tables,
)
from nearid_lib.run import start_run

t0 = time.time()
run = start_run(PROFILE, SEED, "11_retrieval_galleries")
study = open_study(run)

# %% [markdown]
# ## Data: reference set, gallery, simulated methods

# %%
gallery_data(study)

# %% [markdown]
# In `paper`, each method's images come from the user's folder when it has one, else from the
# generation step that `prepare_data` ran (`nearid_lib.fpr.generation`: the diffusers pipelines the
# FPR paper configures; Emu2 and OminiControl only from the user's folder). Which did, per dataset:

# %%
method_sources_table(study)

# %% [markdown]
# ## Encoders (each loaded once; embeddings cached per encoder and image set)

# %%
encoder_table(study)

# %% [markdown]
# Tables this run cannot produce (absent downloads, no generated images, no encoder), each with its reason.

# %%
skipped_tables(study)

# %% [markdown]
# ## The protocol: oracle (references as queries) and the generated images of every method
# One call per run (`fpr.experiments.run_fpr`, as `score_encoder` runs it): every encoder embeds
# the references, the gallery and the generated images (cached), then each retrieval is scored.

# %%
run_protocol(study)

# %% [markdown]
# ## The DB++ column (Tables 1, 5-13): DreamBench++'s GPT concept-preservation score
# `paper` only: `gpt-4o-2024-05-13` through the `openai` client (or any OpenAI-compatible server,
# `retrieval.gpt_base_url`) with DreamBench++'s own subject prompts read from its download, both
# images at 512 px, the score x 0.25, pairs drawn as the FPR authors' stream draws them
# (`nearid_lib.fpr.gpt_score`); answers cached per image pair, so a rerun asks nothing twice, and a
# pair whose request failed is asked again by the next run. Without a key or server, or with a server
# this node cannot reach, the column stays empty and the tables' provenance says why (gate `fpr_gpt`).

# %%
print(score_dbpp(study))

# %% [markdown]
# ## Oracle: real reference images as queries (paper Table 1)

# %%
oracle_results(study)

# %% [markdown]
# ## Main comparison: methods x encoders, similarity and mAP side by side (Figure 3, Tables 5-13)

# %%
main_results(study)

# %% [markdown]
# ## The chance reference
# The general encoder's class at a fixed random init (`efficientnet-lite0@random` in `mini`'s
# `retrieval.encoders`) beside the pretrained one: the oracle's mAP and top-1, and each metric's agreement
# with the true drift. Where the random network reaches the pretrained one, the galleries reward pixels.

# %%
chance_results(study)

# %%
for figure in main_figures(study):
    display(figure)

# %% [markdown]
# ## Per-dataset tables in the paper's columns (Tables 5-13)
# One row per (dataset, method): pairwise similarity and gallery mAP per encoder role (`clip_i`,
# `dino`, `spec` = the dataset's specialised model). A dataset's mAP is the mean of its
# per-species mAPs (the authors' scripts), the all-queries mean is beside it (`*_map_all`).
# In `mini` the roles are the frozen EfficientNet-Lite0 (`clip_i`; no DINO offline) and the NearID
# head (`spec`), and each species of the world is one dataset (`mini/<species>`, the analogue of
# the paper's per-species tables) plus the whole world; the paper's nine dataset files
# (`11_fpr_leopard`, ..., `11_fpr_stanford_cars`) are written only where those galleries exist
# (the `paper` profile). DB++ and CLIP-T need a GPT judge / a CLIP text tower: not in `mini`.

# %%
per_dataset_results(study)

# %%
agreement_results(study)

# %% [markdown]
# ## Gallery ablations: images per subject and number of subjects (Figure 5)
# With the FPR authors' galleries (`paper`), their rule on the Re-ID pools (`fpr.authors_ablations`):
# each subject's images drawn with `random_state=101`, extra subjects from the species' other
# identities (that draw is ours: the authors' is unseeded).

# %%
for shown in gallery_ablation_results(study):
    display(shown)

# %% [markdown]
# ## Gallery sampling: random vs k-means vs curated (Table 2, percent)
# k-means runs in the specialised encoder's space when it is available (the paper used MiewID; with
# the authors' pools: their random / k-means draws and their gallery as "Ours").

# %%
sampling_results(study)

# %% [markdown]
# ## Background removal (Figure 7, Table 14)
# `mini`: the world's object masks on grey. `paper`: the FPR authors' removal, carvekit's TRACER-B7
# mask refined by FBA matting at their settings, composited on grey (`nearid_lib.fpr.bg_removal`);
# the copies are written once by `make bgremove` (sharded over the GPUs), any missing one here.

# %%
for shown in background_results(study):
    display(shown)

# %% [markdown]
# ## Retrieval lists (Figure 4)

# %%
for figure in retrieval_list_figures(study):
    display(figure)

# %% [markdown]
# ## Claims
# Claim 1 (mAP separates methods in drift order, similarity does not) compares rank correlations
# over the methods (point values); claims 2-4 are declared in `nearid_lib/fpr/claims.py` and judged on
# paired 95% bootstrap intervals over subjects from the per-query APs. The specialised encoder is a
# trained head: its other training seeds (published by notebook 03) are scored with the same
# protocol for the claims only, which average over the seeds and carry their spread.

# %%
claims = claims_results(study)
print(f"notebook 11 ran in {time.time() - t0:.1f} s")
claims
