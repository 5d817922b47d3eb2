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
# # 03 - Train the NearID head
# A frozen backbone (mini: EfficientNet-Lite0, 49 tokens x 1280; paper: SigLIP2-so400m) and a trainable
# MAP head, trained with the two-tier NearID loss (paper Sections 3.2, 4.1): NearID rows (anchor view,
# its other views, the anchor view's distractors of the training sources) interleaved with MTG part edits
# that reach only L_rank. Backbone tokens are cached once per image group and variant (full image /
# foreground only) and shared with every later notebook. The head is chosen on the validation split only;
# the test split is scored once, here, against the frozen backbone's own pooled output.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0
RESUME = True

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch

from nearid_lib.config import get_profile, profile_to_dict
from nearid_lib.data import build_world, load_nearid, nearid_root
from nearid_lib.evaluate import Embedder, embed_split, evaluate_split, image_groups, nearid_bench
from nearid_lib.io_utils import atomic_write, write_csv, write_json
from nearid_lib.paths import checkpoint_dir, figures_dir, results_dir
from nearid_lib.runmeta import write_run_metadata
from nearid_lib.seeding import seed_everything
from nearid_lib.models import load_backbone
from nearid_lib.train import train_groups, train_head

torch.set_num_threads(max(1, torch.get_num_threads()))
cfg = get_profile(PROFILE, seed=SEED)
seed_everything(SEED)
out = results_dir(PROFILE, "03_train_nearid")
write_run_metadata(out, {"PROFILE": PROFILE, "SEED": SEED, "RESUME": RESUME}, cfg)
tables = figures_dir(PROFILE) / "tables"
root = build_world(cfg) if cfg.world.source == "procedural" else nearid_root(PROFILE)
data = load_nearid(root)
print(data.manifest.get("counts"), "train sources:", data.train_sources)

# %% [markdown]
# ## Feature caches
# Training reads the train split of the training sources and MTG, in both variants (role-aware foreground
# masking); evaluation reads val/test of every source. Built once, reused by notebooks 04-08.

# %%
t0 = time.time()
backbone = load_backbone(cfg)[0]
frozen = Embedder(backbone, data, profile=PROFILE, batch_size=cfg.backbone.batch_size, store_tokens=True)
frozen.build(train_groups(data, cfg), variants=("full", "fg"))
frozen.build(image_groups(data, ("val", "test")), variants=("full",))
cache_seconds = time.time() - t0
print(f"caches ready in {cache_seconds:.1f}s: {backbone.n_tokens} tokens x {backbone.token_dim}")

# %% [markdown]
# ## Training

# %%
ckpt = checkpoint_dir(PROFILE) / "nearid"
res = train_head(cfg, data, backbone, out_dir=ckpt, resume=RESUME)
train_seconds = res.seconds
print(f"{res.steps} steps in {train_seconds:.1f}s (resumed from step {res.resumed_from}) -> {ckpt}")

# %%
hist = pd.DataFrame(res.history)
fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
roll = max(1, len(hist) // 30)
for col in ("loss", "disc", "rank"):
    if col in hist:
        ax[0].plot(hist["step"], hist[col].rolling(roll, min_periods=1).mean(), label=col)
ax[0].set_xlabel("step")
ax[0].set_title(f"NearID loss ({cfg.train.loss}, alpha={cfg.train.alpha}), rolling mean {roll}")
ax[0].legend()
ax[1].plot(hist["step"], hist["lr"])
ax[1].set_xlabel("step")
ax[1].set_title("learning rate (warmup + cosine)")
fig.tight_layout()
atomic_write(figures_dir(PROFILE) / "03_loss_curves.png", lambda p: fig.savefig(p, dpi=120, format="png"))
write_csv(hist, out / "history.csv")

# %% [markdown]
# ## Validation and test: frozen backbone vs NearID head
# SSR/PA pooled (support-weighted) over all distractor sources, over the training sources, and over the
# sources never seen in training; MTG part-level metrics on the MTG split.

# %%
t0 = time.time()
head_emb = Embedder(backbone, data, head=res.head, profile=PROFILE, batch_size=cfg.backbone.batch_size,
                    store_tokens=True)
frozen_label = f"{backbone.name} {'GAP' if backbone.name.startswith('efficientnet') else 'pooled'} (frozen)"
rows = []
for split in ("val", "test"):
    for key, label, emb in (("frozen", frozen_label, frozen), ("nearid", f"NearID head on {backbone.name}", head_emb)):
        rows.append({"split": split, "row_id": key, "ours_label": label, **evaluate_split(emb, data, split),
                     "profile": PROFILE})
summary = pd.DataFrame(rows)
eval_seconds = time.time() - t0
write_csv(summary, tables / "03_training_summary.csv")
summary[["split", "row_id", "nearid_ssr", "nearid_pa", "train_ssr", "unseen_ssr", "unseen_pa", "mtg_mo",
         "mtg_ssr", "mtg_pa"]].round(2)

# %%
per_source = []
for key, emb in (("frozen", frozen), ("nearid", head_emb)):
    nb = nearid_bench(embed_split(emb, data, "test", with_mtg=False), data.train_sources)
    t = nb["table"].assign(row_id=key, split="test", profile=PROFILE)
    t["seen_in_training"] = t["row"].isin(data.train_sources)
    per_source.append(t)
per_source = pd.concat(per_source, ignore_index=True)
per_source["ssr"] *= 100
per_source["pa"] *= 100
write_csv(per_source, tables / "03_per_source.csv")
per_source.pivot_table(index="row", columns="row_id", values=["ssr", "pa"]).round(1)

# %%
timings = pd.DataFrame([{"cache_s": cache_seconds, "train_s": train_seconds, "eval_s": eval_seconds,
                         "steps": res.steps, "resumed_from_step": res.resumed_from,
                         "s_per_step": train_seconds / max(1, res.steps - res.resumed_from),
                         "threads": torch.get_num_threads(), "profile": PROFILE}])
write_csv(timings, tables / "03_timings.csv")
write_json({"summary": rows, "timings": timings.to_dict("records")[0], "config": profile_to_dict(cfg)},
           out / "summary.json")
timings.round(2)
