# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 00 - Environment
# Which profile runs, on which devices, and which backbones and datasets are available locally.
# `smoke` and `mini` run fully offline; `paper` reads the local hub mirror (`NEARID_HUB_DIR`: every
# repository with its download record below), or the Hugging Face hub (or a warm `HF_HOME`).
# `make preflight` checks everything a paper run reads, in seconds, before this notebook.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import pandas as pd

from nearid_lib.runtime.envcheck import backbone_table, dataset_table, device_table, hub_table
from nearid_lib.io_utils import write_csv
from nearid_lib.paths import cache_dir, data_dir, figures_dir, out_dir
from nearid_lib.run import start_run

run = start_run(PROFILE, SEED, "00_environment")
cfg, meta = run.cfg, run.meta

# %%
summary = pd.DataFrame([
    {"item": "profile", "value": cfg.name},
    {"item": "backbone", "value": cfg.backbone.name + (" (tiny random-init)" if cfg.backbone.tiny else "")},
    {"item": "data source", "value": cfg.world.source},
    {"item": "git sha", "value": f"{meta['git']['sha']} (dirty={meta['git']['dirty']})"},
    {"item": "python / torch", "value": f"{meta['python']} / {meta['packages']['torch']}"},
    {"item": "torch threads", "value": str(run.threads)},
    {"item": "data dir", "value": str(data_dir(PROFILE))},
    {"item": "cache dir", "value": str(cache_dir(PROFILE))},
    {"item": "build dir", "value": str(out_dir(PROFILE))},
    {"item": "figures dir", "value": str(figures_dir(PROFILE))},
])
summary

# %%
devices = device_table()
devices

# %%
backbones = backbone_table()
backbones

# %%
datasets = dataset_table(PROFILE)
datasets

# %% [markdown]
# The local hub mirror (paper profile, `NEARID_HUB_DIR`): every repository the paper path reads, in the
# mirror or not, complete against its download record, at which commit (empty without a mirror).

# %%
mirror = hub_table()
mirror

# %%
write_csv(devices, run.results / "devices.csv")
write_csv(backbones, run.results / "backbones.csv")
write_csv(datasets, run.results / "datasets.csv")
write_csv(mirror, run.results / "hub_mirror.csv")
print("run metadata:", run.results / "run.json")
