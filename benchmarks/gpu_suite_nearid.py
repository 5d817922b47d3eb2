"""The NearID entries of the GPU suite: the token-store prefill, the grouped head step and the curation
of the release. Each runs the library's own code path (``StreamFeatures.prefill``, ``batch_inputs`` +
``loss_step``, ``released_identities.write_identities`` with an ``ObjectMasker``) on synthetic
inputs shaped like the paper's, and returns what it measured with its sizes."""
from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from gpu_suite_core import Ctx, ViewsData, ellipse_mask, peak_gb, photo, png_bytes, reset_peak, sync, timed
from gpu_suite_models import describe, on_device


# ----------------------------------------------------------------------------- prefill
def prefill(ctx: Ctx) -> dict:
    """``make prefill``'s inner loop: SigLIP2-so400m (random init, the profile's float16 weights under
    bf16 autocast, as ``train_features`` runs it on CUDA) encodes every (view, full|fg) grid of a
    folder of 512 px PNG views (4,096 grids) into an int8 ``ShardedTokenStore``, images decoded and
    masked by DataLoader workers (``cores - 1``, prefill_step's default for one rank): grids/s over
    the whole call and in the steady state (after the first chunk, which waits for the workers to
    start). Then the store alone: int8 writes and cold reads of paper-size grids on this disk."""
    from transformers import SiglipVisionConfig

    from nearid_lib.config import get_profile
    from nearid_lib.features.shards import ShardedTokenStore
    from nearid_lib.models.backbones import SiglipEncoder
    from nearid_lib.features.stream import VARIANTS, StreamFeatures
    from paper_scale_parts import bench_store

    cfg = get_profile("paper")
    n_img, px = (24, 64) if ctx.tiny else (2048, cfg.world.image_size)
    t0 = time.perf_counter()
    data = ViewsData(ctx.work / "views", n_img, px, distinct=8 if ctx.tiny else 128, threads=ctx.cores)
    views_s = time.perf_counter() - t0
    with on_device(ctx.dev, torch.float16 if ctx.cuda else torch.float32):
        bb, build_s = timed(ctx.dev, lambda: SiglipEncoder("siglip2-so400m-patch14-384", "none", tiny=True,
                                                             config=SiglipVisionConfig(**ctx.S["siglip"])))
    store = ShardedTokenStore(ctx.work / "store", bb.n_tokens, bb.token_dim, "int8", shard_records=1024)
    feats = StreamFeatures(bb, data, store=store, batch_size=cfg.backbone.batch_size,
                           amp_dtype=torch.bfloat16 if ctx.cuda else None)
    items = list(zip(data.rels, data.masks))
    warm = 4 if ctx.tiny else 64
    feats.prefill(items[:warm], VARIANTS, progress=False, workers=0)           # kernels, allocator
    workers = max(1, min(ctx.cores - 1, 2 if ctx.tiny else 64))
    b0 = feats.stats["backbone_s"]
    marks: list[tuple[float, int]] = []           # (time, grids) at the end of each chunk's forward
    encode = feats.encode

    def timed_encode(rels, *a, **k):                # the instance's encode, timed (prefill calls self.encode)
        out = encode(rels, *a, **k)
        sync(ctx.dev)
        marks.append((time.perf_counter(), len(rels)))
        return out

    feats.encode = timed_encode
    reset_peak(ctx.dev)
    written, sec = timed(ctx.dev, lambda: feats.prefill(items[warm:], VARIANTS, progress=False, workers=workers))
    bb_s = feats.stats["backbone_s"] - b0
    # the steady rate: from the end of the first chunk's forward (the DataLoader's start-up behind it) to the last
    steady = (sum(n for _, n in marks[1:]) / (marks[-1][0] - marks[0][0])) if len(marks) > 1 else None
    st = bench_store(ctx.dev, 16 if ctx.tiny else 2048, 8 if ctx.tiny else 256, dtypes=("int8",), workdir=ctx.work)
    return {"stands_for": "make prefill: ~507k (image, full|fg) grids of so400m tokens into the int8 store",
            "sizes": {"backbone": describe(bb), "tokens": [bb.n_tokens, bb.token_dim], "view_px": px,
                      "batch": cfg.backbone.batch_size, "weights": "float16" if ctx.cuda else "float32",
                      "autocast": "bf16" if ctx.cuda else "off",
                      "dataloader_workers": workers},
            "views_written_s": round(views_s, 2), "build_s": round(build_s, 2), "grids": written,
            "seconds": round(sec, 3), "grids_per_s": written / sec, "grids_per_s_steady": steady,
            "chunks": len(marks), "backbone_s": round(bb_s, 3),
            "backbone_img_per_s": written / bb_s if bb_s else None,
            "store_GBps_during_prefill": written * store.rb / sec / 1e9, "peak_mem_gb": peak_gb(ctx.dev),
            "store_int8": {k: v for k, v in st["int8"].items() if k != "record_bytes"},
            "record_bytes": st["int8"]["record_bytes"]}


# ----------------------------------------------------------------------------- grouped head step
class _Tokens:
    """Backbone tokens of any slots from memory (the store's reads are measured by ``prefill``):
    a fixed random block on the device, sliced to the step's slots."""

    def __init__(self, n_tokens: int, dim: int, max_slots: int, dev: torch.device):
        g = torch.Generator(device=dev).manual_seed(0)
        self.buf = torch.randn(max_slots, n_tokens, dim, generator=g, device=dev)

    def tokens(self, rels, masks, fg, rng) -> torch.Tensor:
        return self.buf[:len(rels)]


def paper_rows(n: int, K: int = 4, P: int = 2):
    """A batch of ``n`` rows shaped like the paper's (``TrainRows``): 12 of 25 NearID rows (anchor,
    1-2 other views, K training-source distractors) and MTG rows (anchor, positive, two part edits
    with their oracle), as ``rows.epoch_rows`` lays them out."""
    from nearid_lib.nearid.rows import TrainRows

    rng = np.random.default_rng(0)
    cols: list[list] = [[] for _ in range(8)]
    for r in range(n):
        mtg = r % 25 >= 12
        n_pos, n_dis = (1, 2) if mtg else (int(rng.integers(1, 3)), K)
        pos = [f"r{r}/p{j}.png" if j < n_pos else "" for j in range(P)]
        dis = [f"r{r}/d{j}.png" if j < n_dis else "" for j in range(K)]
        orc = [float(rng.uniform()) if (mtg and j < n_dis) else np.nan for j in range(K)]
        for c, v in zip(cols, (f"r{r}/a.png", f"r{r}/a_m.png", pos, [p and p[:-4] + "_m.png" for p in pos], dis,
                               [d and d[:-4] + "_m.png" for d in dis], orc, False)):
            c.append(v)
    obj = lambda c: np.array(c, dtype=object)  # noqa: E731
    return TrainRows(obj(cols[0]), obj(cols[1]), obj(cols[2]), obj(cols[3]), obj(cols[4]), obj(cols[5]),
                     np.array(cols[6], dtype=float), np.array(cols[7], dtype=bool))


def head_group(ctx: Ctx) -> dict:
    """``nearid.train.train_group``'s step at paper geometry: the step's inputs prepared once
    (``batch_inputs``: role-aware masking, token crops; tokens from memory), then each of k heads
    takes its own ``loss_step`` (forward, loss, backward, AdamW, schedule) under the profile's
    autocast (fp16), and the largest group once more under bf16. k = 1, 4, 12 (tiny: 1, 2): the heads
    are the paper's 12-head batch stream (Tables 1/3/8/9: the main head, SigLIP, Circle, cohesion,
    every alpha and beta), each with its own loss."""
    from bench_sweep_plan import suite
    from nearid_lib.config import with_overrides
    from nearid_lib.nearid.group import groups_of
    from nearid_lib.nearid.losses import make_loss_parameters
    from nearid_lib.nearid.train import amp_context, batch_inputs, dropout_generator, loss_step
    from nearid_lib.nearid.train import build_head, make_scheduler

    runs = suite(1)
    group = max(groups_of([c for _, c in runs]), key=len)
    cfgs = [runs[i][1] for i in group]
    names = [runs[i][0][0] for i in group]
    n_tok, dim = (16, 32) if ctx.tiny else (729, 1152)
    if ctx.tiny:                                   # the paper's head over 32-wide tokens: 4 heads, 32 out
        cfgs = [with_overrides(c, {"head.num_heads": 4, "head.out_dim": dim}) for c in cfgs]
    B = 8 if ctx.tiny else cfgs[0].train.batch_size
    rows = paper_rows(B)
    feats = _Tokens(n_tok, dim, 7 * B, ctx.dev)           # at most 1 + 2 + 4 slots a row
    warm, reps = (1, 1) if ctx.tiny else (2, 5)
    ks = (1, 2) if ctx.tiny else (1, 4, 12)
    profile_mp = cfgs[0].train.mixed_precision
    # the profile's autocast for every k; bf16 too (the question) for the largest group
    plan = [(k, profile_mp) for k in ks] + ([(ks[-1], "bf16")] if profile_mp != "bf16" else [])
    out = []
    for k, mp in plan:
        members = []
        for c in cfgs[:k]:
            c = with_overrides(c, {"train.mixed_precision": mp})
            head = build_head(c, dim).to(ctx.dev)
            lp = make_loss_parameters(c.train.loss, c).to(ctx.dev)
            opt = torch.optim.AdamW(list(head.parameters()) + list(lp.parameters()), lr=c.train.lr,
                                    weight_decay=c.train.weight_decay)
            members.append((c, head.train(), lp, opt, make_scheduler(opt, int(c.train.warmup_steps), 3350),
                            amp_context(c, ctx.dev)))
        reset_peak(ctx.dev)
        prep, steps = [], []
        for step in range(warm + reps):
            x, t_prep = timed(ctx.dev, lambda: batch_inputs(cfgs[0], feats, rows, 0, B, step, 0, ctx.dev))
            _, t_step = timed(ctx.dev, lambda: [loss_step(c, h, lp, o, s, x, dropout_generator(c, step, 0, ctx.dev), a,
                                                          ctx.dev) for c, h, lp, o, s, a in members])
            if step >= warm:
                prep.append(t_prep)
                steps.append(t_step)
        s = statistics.median(steps)
        out.append({"heads": k, "autocast": mp if ctx.cuda or mp == "bf16" else "off", "step_s": s,
                    "per_head_step_s": s / k, "prepare_s": statistics.median(prep), "peak_mem_gb": peak_gb(ctx.dev),
                    "slots": int(x.tok.shape[0])})
        del members, x
    return {"stands_for": "the sweep's head steps (notebooks 03-07): 3,350 steps per batch stream, every head of "
                          "the stream stepping on the same tokens",
            "sizes": {"tokens": [n_tok, dim], "rows": B, "head": {"num_heads": cfgs[0].head.num_heads,
                      "mlp_ratio": cfgs[0].head.mlp_ratio, "out_dim": cfgs[0].head.out_dim},
                      "autocast": f"{profile_mp} (the profile's; bf16 beside it)" if ctx.cuda else "off (CPU)",
                      "heads_of_the_stream": names},
            "groups": out}


# ----------------------------------------------------------------------------- curation
class _Rows:
    """A row-aligned table as ``write_identities`` reads a released dataset: ``t[i]`` a row,
    ``t["id"]`` the id column."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k):
        return [r[k] for r in self.rows] if isinstance(k, str) else self.rows[k]


# NearID's nine distractor repositories and the resolution each is published at (the *_1024 / _1328
# variants at their generators' native size; write_identities Lanczos-resizes them to the view's)
SOURCE_PX = {"Flux": 512, "Flux_1024": 1024, "FluxC": 512, "FluxC_1024": 1024, "PowerPaint": 512, "Qwen": 512,
             "Qwen_1328": 1328, "SDXL": 512, "SDXL_1024": 1024}
_PROMPTS = ("a red ceramic mug with a blue handle", "a wooden toy robot with brass joints",
            "a green backpack with two side pockets", "a white sneaker with orange laces")


def released_rows(n: int, px: int, tiny: bool) -> tuple[_Rows, dict]:
    """``(positives, {source: (repo, distractors)})`` of ``n`` identities (a third with three views,
    as NearID: 6,433 of 19,386), images as PNG bytes drawn from a small pool of photo crops."""
    pool: dict[int, list[bytes]] = {}

    def img(i: int, size: int) -> dict:
        size = min(size, 2 * px) if tiny else size
        lst = pool.setdefault(size, [png_bytes(photo(j, size)) for j in range(4 if tiny else 12)])
        return {"bytes": lst[i % len(lst)], "path": None}

    pos, dists = [], {s: [] for s in SOURCE_PX}
    for i in range(n):
        v = 3 if i % 3 == 0 else 2
        pos.append({"id": 1000 + i, "category": "object", "category_description": _PROMPTS[i % len(_PROMPTS)],
                    "n_images": v, **{f"img{k}": img(i + k, px) if k <= v else None for k in (1, 2, 3)}})
        for s, spx in SOURCE_PX.items():
            dists[s].append({"id": 1000 + i, **{f"nimg{k}": img(i + k + 5, spx) if k <= v else None
                                                for k in (1, 2, 3)}})
    return _Rows(pos), {s: (f"Aleksandar/NearID-{s}", _Rows(r)) for s, r in dists.items()}


def curation(ctx: Ctx) -> dict:
    """``make curate``'s work for one rank: ``write_identities`` (blocks of 16 identities: views and
    distractors decoded by threads, one ``ObjectMasker`` call per block on CLIPSeg rd64-refined,
    views, masks and the 9 sources' distractors written as PNG by the threads), then its parts
    alone: masks per second of the masker, PNG writes per second of the threads."""
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, ViTImageProcessor

    from nearid_lib.data.masks import ObjectMasker
    from nearid_lib.data.released_identities import BLOCK, write_identities
    from nearid_lib.data.released_schema import write_png as _save
    from nearid_lib.generate.tiny_sd import clip_tokenizer_offline
    from PIL import Image

    spec = ctx.S["clipseg"]
    px = 64 if ctx.tiny else 512
    with on_device(ctx.dev, torch.float32):                      # the checkpoint's dtype (from_pretrained's)
        model, build_s = timed(ctx.dev, lambda: CLIPSegForImageSegmentation(CLIPSegConfig(**spec["config"])))
    ip = ViTImageProcessor(do_resize=True, size={"height": spec["input_px"], "width": spec["input_px"]},
                           resample=Image.BILINEAR, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                           image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    proc = CLIPSegProcessor(image_processor=ip, tokenizer=clip_tokenizer_offline(model_max_length=77))
    masker = ObjectMasker(model, proc, device=ctx.dev)
    n_ids, block = (8, 4) if ctx.tiny else (96, BLOCK)
    pos, dists = released_rows(n_ids, px, ctx.tiny)
    ims = [photo(i, px) for i in range(8 if ctx.tiny else 64)]
    masker(ims[:8], [_PROMPTS[0]] * 8)                             # warm-up
    reset_peak(ctx.dev)
    _, mask_s = timed(ctx.dev, lambda: masker(ims, [_PROMPTS[i % 4] for i in range(len(ims))]))
    root = ctx.work / "curate"
    workers = ctx.cores
    t0 = time.perf_counter()
    written = write_identities(root, pos, dists, ["train"] * n_ids, masker, "Aleksandar/NearID", io_workers=workers,
                               block=block)
    ids_s = time.perf_counter() - t0
    files = [f for f in root.rglob("*.png")]
    nbytes = sum(f.stat().st_size for f in files)
    out_dir = ctx.work / "png_writes"
    views = [photo(i, px) for i in range(16)]
    n_w = 64 if ctx.tiny else 512
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda i: _save(out_dir, f"{i}.png", views[i % 16]), range(n_w)))
    png_s = time.perf_counter() - t0
    mask_arr = ellipse_mask(0, px)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda i: _save(out_dir, f"m{i}.png", Image.fromarray(mask_arr.astype(np.uint8) * 255, "L")),
                      range(n_w)))
    mpng_s = time.perf_counter() - t0
    sync(ctx.dev)
    return {"stands_for": "make curate: 19,386 identities (views, CLIPSeg masks, 9 sources' distractors) written as PNG",
            "sizes": {"masker": describe(model), "input_px": spec["input_px"], "view_px": px,
                      "masker_batch": masker.batch_size, "block": block, "io_threads": workers,
                      "sources": SOURCE_PX if not ctx.tiny else "as paper, capped at 2x the view"},
            "build_s": round(build_s, 2), "identities": written, "seconds": round(ids_s, 3),
            "identities_per_s": written / ids_s, "pngs_written": len(files), "bytes_per_identity": nbytes / max(1, written),
            "masks_per_s": len(ims) / mask_s, "view_png_writes_per_s": n_w / png_s, "mask_png_writes_per_s": n_w / mpng_s,
            "peak_mem_gb": peak_gb(ctx.dev), "cpu_count": os.cpu_count()}
