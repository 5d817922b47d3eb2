# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 02 - Distractor generation
# NearID (Section 3.3, Appendix B.1) inpaints a *near-identity distractor* - a same-class, different
# instance - into the exact background and mask of every positive view, with several generators
# (one dataset "source" each). All generators sit behind one fill interface
# (`nearid_lib.generate`), and `runner.generate_source` runs any of them sharded, resumable and
# deterministic (per-item seeds from the item id), writing the NearID schema
# (`distractors/<source>.csv`, row-aligned with `positives.csv`).
#
# - `smoke` / `mini`: the procedural backend of the NearID-mini world regenerates every source of the
#   world through the runner; we verify the regenerated pixels equal the world's, report the
#   quality filters, and time the procedural backend and a real (tiny, random-weight) diffusers SD
#   inpainting pipeline.
# - `paper`: the 9 sources are *released* (`Aleksandar/NearID-<source>`, read by notebook 01); this
#   notebook summarises them and regenerates nothing by default (all 9 would cost hundreds of
#   A100-hours, see the projection below). Regeneration is opt-in per source
#   (`NEARID_SET=generate.sources=Flux,SDXL`) with the diffusers backends (SDXL, FLUX Fill, FLUX Canny,
#   Qwen-Image ControlNet; PowerPaint only with a BrushNet pipeline you hand in, else it is excluded
#   with the reason before anything runs). Regenerated sources go to `<dataset>_regenerated/` and are
#   never registered into the dataset, so they never enter an evaluation pool. For N GPUs use the CLI
#   under `accelerate launch` (README).

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0
N_THROUGHPUT = 24     # items timed per backend
N_EXAMPLES = 3        # rows of the example figure

# %%
import shutil
import time

import numpy as np
import pandas as pd
from IPython.display import display
from PIL import Image

from nearid_lib import plots
from nearid_lib.data import build_world
from nearid_lib.generate import get_backend
from nearid_lib.generate.items import example_paths, items_from_dataset
from nearid_lib.generate.merge import merge_source
from nearid_lib.generate.plan import (NEARID_VIEWS, projected_source_costs, regeneration_plan, regeneration_root,
                                      released_source_summary)
from nearid_lib.data.world_sources import (regenerate_world_sources, world_pixel_check, world_request_fn,
                                           world_source_backend)
from nearid_lib.generate.quality import QualityFilter
from nearid_lib.generate.runner import generate_source
from nearid_lib.io_utils import write_csv
from nearid_lib.paths import data_dir
from nearid_lib.run import setup_notebook

# no dataset load: this notebook makes (procedural) or summarises (released) the sources itself
nb = setup_notebook(PROFILE, SEED, "02_distractor_generation", data=False, N_THROUGHPUT=N_THROUGHPUT,
                    N_EXAMPLES=N_EXAMPLES)
run, cfg = nb.run, nb.cfg
g = cfg.generate
RES = run.results
root = data_dir(PROFILE) / "nearid"
qf = QualityFilter(g.reject_unchanged_below, g.reject_drift_above)
procedural = cfg.world.source == "procedural"
if procedural:
    build_world(cfg, root)
items = items_from_dataset(root, seed=cfg.seed)
if procedural and g.verify_splits:
    items = [it for it in items if it.split in g.verify_splits]
print(f"{PROFILE}: {len(items)} views to fill per source, root {root}")

# %% [markdown]
# ## Generate sources through the runner
# `mini`: regenerate the procedural world's sources into a separate root and check them against
# the world pixel by pixel (the world builder and the runner draw the same per-item requests).
# The quality filters run with no retries so that regenerated items stay comparable.
# `paper`: the released sources as read by notebook 01, then the opt-in regeneration plan.

# %%
if procedural:
    regen = RES / "regenerated"
    sources = list(cfg.world.distractor_sources)
    plan, excluded = [(s, None, None) for s in sources], {}
    # one source per process (NEARID_WORKERS); the loop below then finds them done
    regenerate_world_sources(cfg, root, regen, sources, items, quality=qf, batch_size=g.batch_size)
else:
    regen = regeneration_root(root)
    released = released_source_summary(root)
    run.write_table(released, "02_released_sources")
    print(released.to_string(index=False))
    sources = released.source.tolist()
    plan, excluded = regeneration_plan(cfg)
    print(f"regeneration (opt-in, generate.sources): {[p[0] for p in plan] or 'none'}; "
          f"excluded: {excluded or 'none'}")
reports, checks = [], []
for source, name, res in plan:
    if procedural:
        backend, request_fn = world_source_backend(cfg, root, source)
        kw = dict(input_root=root, request_fn=request_fn, retries=0)
    else:
        backend = get_backend(name, resolution=res, mixed_precision=g.mixed_precision,
                              hub_ids=dict(g.hub_ids))
        kw = dict(input_root=root, retries=g.retries)
    generate_source(backend, items, regen, source, seed=cfg.seed, shard=None,
                    batch_size=g.batch_size, quality=qf, progress=False, **kw)
    table, report = merge_source(regen, source, items, profile=PROFILE, backend=backend.name,
                                 input_root=root)
    reports.append(report)
    if procedural:
        checks.append(world_pixel_check(table, source, regen, root))
if excluded:
    run.write_table(pd.DataFrame({"source": list(excluded), "reason": list(excluded.values())}),
                    "02_regeneration_excluded")
if reports:
    quality = pd.concat(reports, ignore_index=True)
    run.write_table(quality, "02_quality_filter")
else:
    quality = None
    print("no source regenerated in this run: no quality-filter table")
quality

# %%
if procedural:
    verify = pd.DataFrame(checks)
    write_csv(verify, RES / "02_regeneration_check.csv")
    print(verify.to_string(index=False))

# %% [markdown]
# ## Throughput
# Measured here (CPU, `N_THROUGHPUT` fresh items per backend): the procedural backend and a real
# diffusers `StableDiffusionInpaintPipeline` with tiny random weights at 64 px (4 steps). The paper
# backends cannot run here; their A100 time per source is *projected* from the step counts with a
# stated assumption of seconds per denoising step at the backend's native resolution
# (`GenerateConfig.a100_seconds_per_step`, bf16, batch 1), scaled by the pixel count for 512 px.

# %%
tp_root = RES / "throughput"
shutil.rmtree(tp_root, ignore_errors=True)
tp_items = sorted([it for it in items if it.split == "test"] or items,
                  key=lambda it: it.item_id)[:N_THROUGHPUT]
measured = []
if procedural:
    request_fn, size = world_request_fn(cfg, root, sources[0])
    t0 = time.perf_counter()
    s = generate_source(get_backend("procedural"), tp_items, tp_root, "procedural", seed=cfg.seed,
                        shard=(0, 1), input_root=root, request_fn=request_fn, progress=False)
    measured.append({"backend": "procedural", "device": "cpu", "steps": 0, "resolution": size,
                     "seconds": time.perf_counter() - t0, "n": len(tp_items)})
tiny = get_backend("tiny_sd", composite=True)
tiny.fill(Image.new("RGB", (64, 64)), Image.new("L", (64, 64), 255), "warm-up", 0)
t0 = time.perf_counter()
generate_source(tiny, tp_items, tp_root, "tiny_sd", seed=cfg.seed, shard=(0, 1),
                batch_size=max(1, g.batch_size), input_root=root, progress=False)
measured.append({"backend": "tiny_sd", "device": "cpu", "steps": tiny.defaults["num_inference_steps"],
                 "resolution": tiny.resolution, "seconds": time.perf_counter() - t0,
                 "n": len(tp_items)})
measured = pd.DataFrame(measured)
measured["items_per_s"] = measured.n / measured.seconds
measured["s_per_step"] = np.where(measured.steps > 0,
                                  measured.seconds / measured.n / measured.steps.clip(lower=1), np.nan)

# one distractor per NearID view (NEARID_VIEWS, the paper's 45,215 images) per source
proj = projected_source_costs(dict(g.a100_seconds_per_step), n_views=NEARID_VIEWS, n_gpus=8)
throughput = pd.concat([measured.drop(columns=["seconds", "n"]).assign(source="(measured here)"), proj],
                       ignore_index=True)
throughput["assumption"] = np.where(
    throughput.device.str.startswith("A100"),
    "s/step at native res (GenerateConfig.a100_seconds_per_step), x (res/native)^2, batch 1",
    "measured wall time incl. I/O, quality filter, PNG writes")
run.write_table(throughput, "02_throughput")
throughput

# %% [markdown]
# ## Examples per source
# Each row: a test view, its procedural distractors from every source (same background, same mask,
# a near-identity instance), and the tiny random-weight SD pipeline's fill (noise: it has no
# training, it only shows the real diffusers code path end to end).

# %%
ex = tp_items[:N_EXAMPLES]
cols = {"positive": (root, None), **{s: (regen if procedural else root, s) for s in sources},
        "tiny_sd": (tp_root, "tiny_sd")}                 # column title -> (root, source)
fig = plots.image_grid(example_paths(ex, list(cols.values())), list(cols), [it.item_id for it in ex],
                       title=f"NearID distractor sources ({PROFILE})")
display(run.figure(fig, "02_distractor_examples"))
