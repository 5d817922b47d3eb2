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

from nearid_lib.config import profile_to_dict
from nearid_lib.data import load_profile_data
from nearid_lib.io_utils import write_csv, write_json
from nearid_lib.models import load_backbone
from nearid_lib.nearid.embedder import Embedder, image_groups
from nearid_lib.nearid.evaluate import embed_split, evaluate_split, nearid_bench
from nearid_lib.nearid.rows import train_groups
from nearid_lib.nearid.train import train_head
from nearid_lib.paths import checkpoint_dir
from nearid_lib.run import start_run

run = start_run(PROFILE, SEED, "03_train_nearid", RESUME=RESUME)
cfg = run.cfg
data = load_profile_data(cfg)
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
write_csv(hist, run.results / "history.csv")
run.figure(fig, "03_loss_curves")

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
        rows.append({"split": split, "row_id": key, "ours_label": label, **evaluate_split(emb, data, split)})
summary = pd.DataFrame(rows)
eval_seconds = time.time() - t0
run.write_table(summary, "03_training_summary")
summary[["split", "row_id", "nearid_ssr", "nearid_pa", "train_ssr", "unseen_ssr", "unseen_pa", "mtg_mo",
         "mtg_ssr", "mtg_pa"]].round(2)

# %%
per_source = []
for key, emb in (("frozen", frozen), ("nearid", head_emb)):
    nb = nearid_bench(embed_split(emb, data, "test", with_mtg=False), data.train_sources)
    t = nb["table"].assign(row_id=key, split="test")
    t["seen_in_training"] = t["row"].isin(data.train_sources)
    per_source.append(t)
per_source = pd.concat(per_source, ignore_index=True)
per_source["ssr"] *= 100
per_source["pa"] *= 100
run.write_table(per_source, "03_per_source")
per_source.pivot_table(index="row", columns="row_id", values=["ssr", "pa"]).round(1)

# %%
timings = pd.DataFrame([{"cache_s": cache_seconds, "train_s": train_seconds, "eval_s": eval_seconds,
                         "steps": res.steps, "resumed_from_step": res.resumed_from,
                         "s_per_step": train_seconds / max(1, res.steps - res.resumed_from),
                         "threads": run.threads}])
run.write_table(timings, "03_timings")
write_json({"summary": rows, "timings": timings.to_dict("records")[0], "config": profile_to_dict(cfg)},
           run.results / "summary.json")
timings.round(2)
