# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 03 - Train the NearID head
# A frozen backbone and a trainable MAP head, trained with the two-tier NearID loss (paper Sections
# 3.2, 4.1): NearID rows (anchor view, its other views, the anchor view's distractors of the training
# sources) interleaved with MTG part-edit rows (4x), which enter L_disc and L_rank like NearID rows.
# In `mini` the head reads EfficientNet-Lite0's stride-16 stage (14 x 14 tokens x 112, `backbone.token_layer`);
# the frozen baseline stays the backbone's own pooled output (global average of the last map). In
# `paper` it reads SigLIP2-so400m's 729 patch tokens.
#
# The recipe (steps, schedule, data) was chosen on the validation split only (README, "The mini
# mechanism"); every row of every NearID table is trained with it, for `eval.n_seeds` seeds. The head
# of the notebook's own seed is the checkpoint later notebooks load; the other seeds' heads are
# published beside it (`nearid_lib.models.published`), so the claims of notebooks 10 and 11 that
# judge the head average over its trainings.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0
RESUME = True

# %%
import json
import time

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from nearid_lib.models import load_backbone, load_head
from nearid_lib.nearid.ablations import main_row
from nearid_lib.data.groups import image_groups
from nearid_lib.features import Embedder
from nearid_lib.nearid.evaluate import evaluate_split
from nearid_lib.models.published import publish_seeds, published_seeds
from nearid_lib.nearid.rows import train_groups
from nearid_lib.nearid.sweep import run_rows
from nearid_lib.paths import checkpoint_dir
from nearid_lib.run import setup_notebook

# build_data: the dataset is made here when notebook 01 has not (or not finished)
nb = setup_notebook(PROFILE, SEED, "03_train_nearid", build_data=True, RESUME=RESUME)
run, cfg, data, seeds = nb.run, nb.cfg, nb.data, nb.seeds
print(data.manifest.get("counts"), "| training sources:", data.train_sources, "| seeds:", seeds)

# %% [markdown]
# ## Feature caches
# Training reads the train split of the training sources and MTG, in both variants (role-aware foreground
# masking); evaluation reads val/test of every source, full and foreground-only. Built once, reused by
# notebooks 04-11. The missing caches are built in `NEARID_WORKERS` processes (the Makefile sets 2).
# `paper` (`train.token_store = "int8"`): every token grid lives in one int8 sharded store. This cell
# fills its val/test grids (the group caches keep only the frozen pooled outputs); the training grids are
# filled lazily by the trainings themselves (each grid encoded once, by the process that first needs it).

# %%
t0 = time.time()
backbone = load_backbone(cfg)[0]
frozen = Embedder(backbone, data, profile=cfg, batch_size=cfg.backbone.batch_size, store_tokens=True)
train_cached = train_groups(data, cfg) if cfg.train.token_store == "cache" else []
frozen.build(train_cached + image_groups(data, ("val", "test")), variants=("full", "fg"))
cache_seconds = time.time() - t0
print(f"caches ready in {cache_seconds:.1f}s: {backbone.n_tokens} tokens x {backbone.token_dim}")

# %% [markdown]
# ## Training, every seed
# Each seed is one resumable run keyed by configuration, data and library code; notebooks 05-07 reuse
# these runs for their L_NearID rows.

# %%
t0 = time.time()
main = run_rows(cfg, data, backbone, [main_row(cfg)], seeds, reuse=RESUME)
train_seconds = time.time() - t0
own = next(r for r in main.runs["nearid"] if r.seed == SEED)
ckpt = publish_seeds({r.seed: r.directory for r in main.runs["nearid"]}, SEED, checkpoint_dir(PROFILE) / "nearid")
print(f"seed {SEED}: {own.steps} steps; checkpoint -> {ckpt} (seeds {list(published_seeds(ckpt))})")

# %%
hist = pd.DataFrame(json.loads((own.directory / "history.json").read_text())["history"])
fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
roll = max(1, len(hist) // 30)
for col in ("loss", "disc", "rank"):
    if col in hist:
        ax[0].plot(hist["step"], hist[col].rolling(roll, min_periods=1).mean(), label=col)
ax[0].set_xlabel("step")
ax[0].set_ylabel("loss (rolling mean)")
ax[0].set_title(f"NearID loss ({cfg.train.loss}, alpha={cfg.train.alpha}), seed {SEED}, rolling mean {roll}")
ax[0].legend()
ax[1].plot(hist["step"], hist["lr"])
ax[1].set_xlabel("step")
ax[1].set_ylabel("learning rate")
ax[1].set_title("learning rate (warmup + cosine)")
fig.tight_layout()
display(run.figure(fig, "03_loss_curves"))

# %% [markdown]
# ## Validation: frozen backbone vs the head (every seed)
# The split the recipe was chosen on. SSR/PA pooled (support-weighted) over the Table 1 sources
# (training + unseen fill-based), the training sources, the unseen ones; MTG part-level metrics.

# %%
t0 = time.time()
rows = [{"split": "val", "row_id": "frozen", "seed": None, "ours_label": f"{backbone.name} pooled (frozen)",
         **evaluate_split(frozen, data, "val")}]
for r in main.runs["nearid"]:
    emb = Embedder(backbone, data, head=load_head(r.directory)[0], profile=cfg,
                   batch_size=cfg.backbone.batch_size)
    rows.append({"split": "val", "row_id": "nearid", "seed": r.seed, "ours_label": main.rows[0].label,
                 **evaluate_split(emb, data, "val")})
val = pd.DataFrame(rows)
eval_seconds = time.time() - t0
run.write_table(val, "03_validation", seeds=seeds)
val[["row_id", "seed", "nearid_ssr", "nearid_pa", "train_ssr", "unseen_ssr", "mtg_mo", "mtg_ssr"]].round(2)

# %%
timings = pd.DataFrame([{"cache_s": cache_seconds, "train_s": train_seconds, "eval_s": eval_seconds,
                         "seeds": len(seeds), "steps": own.steps,
                         "s_per_step": sum(r.seconds for r in main.runs["nearid"]) / max(1, own.steps * len(seeds)),
                         "reused": main.summary()["reused"].iloc[0], "threads": run.threads}])
run.write_table(timings, "03_timings")
timings.round(2)
