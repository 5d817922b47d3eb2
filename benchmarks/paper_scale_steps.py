"""Training steps, evaluation and token-precision measurements of ``bench_paper_scale.py`` over a
small on-disk image set shaped like the paper's batches (PNG decode, role-aware masks, the NearID loss)."""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from nearid_lib.config import get_profile
from nearid_lib.features.shards import CODECS, ShardedTokenStore, decode_tokens, encode_tokens
from nearid_lib.models import MAPHead
from nearid_lib.nearid.losses import compute_loss
from nearid_lib.features.stream import StreamFeatures
from paper_scale_parts import P, sync, timeit


# ----------------------------------------------------------------------------- fake dataset
class FakeData:
    """Images (PNG crops of bundled photographs) and object masks (ellipses) on disk, read like
    :class:`~nearid_lib.data.NearIDData` reads them (decode at every call)."""

    def __init__(self, root: Path, n: int, size: int, seed: int = 0):
        import skimage.data as skd

        self.root = Path(root)
        (self.root / "img").mkdir(parents=True, exist_ok=True)
        photos = [skd.astronaut(), skd.chelsea(), skd.coffee(), skd.rocket()]
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[:size, :size]
        self.rels, self.masks = [], []
        for i in range(n):
            ph = photos[i % len(photos)]
            c = int(min(ph.shape[:2]) * rng.uniform(0.5, 0.9))
            y, x = rng.integers(0, ph.shape[0] - c + 1), rng.integers(0, ph.shape[1] - c + 1)
            Image.fromarray(ph[y:y + c, x:x + c]).resize((size, size)).save(self.root / f"img/{i}.png")
            cy, cx = size * rng.uniform(0.35, 0.65, 2)
            ry, rx = size * rng.uniform(0.15, 0.3, 2)
            m = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
            Image.fromarray((m * 255).astype(np.uint8)).save(self.root / f"img/{i}_mask.png")
            self.rels.append(f"img/{i}.png")
            self.masks.append(f"img/{i}_mask.png")

    def image(self, rel):
        with Image.open(self.root / rel) as im:
            return im.convert("RGB")

    def mask(self, rel):
        with Image.open(self.root / rel) as im:
            return np.asarray(im.convert("L")) > 127


def paper_batch(data: FakeData, n_rows: int, rng, K: int = 4, P_: int = 2):
    """A batch shaped like the paper's: ~48% NearID rows (anchor, 1-2 positives, K distractors) and
    ~52% MTG rows (anchor, positive, 2 part edits; rank-only); slots drawn from ``data``'s images.
    Returns (rels, masks, roles, layout) where layout rebuilds [n, P] / [n, K] tables."""
    rels, masks, roles, layout = [], [], [], []
    j = 0

    def take():
        nonlocal j
        i = j % len(data.rels)
        j += 1
        return data.rels[i], data.masks[i]

    for r in range(n_rows):
        mtg = r % 25 >= 12                       # 12 of 25 NearID rows: ~18.8k of ~39.0k rows an epoch
        n_pos = 1 if mtg else int(rng.integers(1, 3))
        n_dis = 2 if mtg else K
        layout.append((n_pos, n_dis, mtg))
        for role, n in ((0, 1), (1, n_pos), (2, n_dis)):
            for _ in range(n):
                a, m = take()
                rels.append(a)
                masks.append(m)
                roles.append(role)
    return rels, masks, np.array(roles), layout


def loss_step(head, opt, emb, roles, layout, cfg, K=4, P_=2):
    """Put slot embeddings into [n, P] / [n, K] tables like the trainer, NearID loss, AdamW step."""
    e = F.normalize(emb.float(), dim=-1)
    n, E = len(layout), e.shape[1]
    a = e[roles == 0]
    pos, dis = e.new_zeros(n, P_, E), e.new_zeros(n, K, E)
    pm = torch.zeros(n, P_, dtype=torch.bool, device=e.device)
    dm = torch.zeros(n, K, dtype=torch.bool, device=e.device)
    pe, de = e[roles == 1], e[roles == 2]
    ip = idd = 0
    for i, (npos, ndis, _) in enumerate(layout):
        pos[i, :npos], pm[i, :npos] = pe[ip:ip + npos], True
        dis[i, :ndis], dm[i, :ndis] = de[idd:idd + ndis], True
        ip, idd = ip + npos, idd + ndis
    ro = torch.tensor([m for _, _, m in layout], device=e.device)
    loss, _ = compute_loss("nearid", a, pos, dis, pm, dm, cfg, rank_only=ro,
                           dist_oracle=torch.full((n, K), float("nan"), device=e.device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def step_pair(backbone, head, data, n_rows, reps, dev, store_dtypes=("int8",), workdir=None,
              amp_dtype=torch.bfloat16) -> dict:
    """One training step (slot tokens -> head -> NearID loss -> AdamW) over the same rows, tokens
    streamed from the backbone vs read from a prefilled store of each dtype; seconds per step."""
    cfg = get_profile("paper")
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=1e-4)
    rng = np.random.default_rng(0)
    rels, masks, roles, layout = paper_batch(data, n_rows, rng)
    tc = cfg.train
    fg = rng.random(len(rels)) < np.asarray([tc.mask_p_anchor, tc.mask_p_positive, tc.mask_p_distractor])[roles]
    hamp = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)

    def run(feats):
        tok = feats.tokens(rels, masks, fg, rng).to(dev)
        with hamp:
            emb = head(tok)
        return loss_step(head, opt, emb, roles, layout, cfg)

    res = {"rows": n_rows, "slots": len(rels), "fg_slots": int(fg.sum())}
    stream = StreamFeatures(backbone, data, store=None, batch_size=64, amp_dtype=amp_dtype)
    res["stream_s"] = statistics.median(timeit(lambda: run(stream), dev, 1, reps))
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for dt in store_dtypes:
            st = ShardedTokenStore(Path(tmp) / dt, backbone.n_tokens, backbone.token_dim, dt)
            feats = StreamFeatures(backbone, data, store=st, batch_size=64, amp_dtype=amp_dtype)
            feats.tokens(rels, masks, fg, rng)                    # fill: every slot's grid stored
            res[f"store_{dt}_s"] = statistics.median(timeit(lambda: run(feats), dev, 1, max(reps, 3)))
            res[f"ratio_stream_over_{dt}"] = res["stream_s"] / res[f"store_{dt}_s"]
    return res


# ----------------------------------------------------------------------------- evaluation
def bench_eval(dev, n_grids, batch, workdir=None) -> dict:
    """Evaluation of one checkpoint from a store of test grids: read + decode + head forward (exact
    fast path, no grad; bf16 on CUDA) per grid at paper size, and the SSR/PA arithmetic of 9 sources
    x 500 identities x 2 conditions on random embeddings (measured at full size)."""
    from nearid_lib.metrics import ssr_pa
    from nearid_lib.metrics.nearid import nearid_similarities, pool_sources

    torch.manual_seed(0)
    head = MAPHead(P["dim"], num_heads=P["heads"], hidden=P["mlp"]).to(dev).eval()
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)
    x = torch.randn(batch, P["tokens"], P["dim"])
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        st = ShardedTokenStore(tmp, P["tokens"], P["dim"], "int8")
        for b0 in range(0, n_grids, batch):
            st.put([(f"t/{i}.png", "full") for i in range(b0, min(n_grids, b0 + batch))], x[:min(batch, n_grids - b0)])
        keys = st.keys()
        t_read = t_head = 0.0
        for b0 in range(0, len(keys), batch):
            sync(dev)
            t0 = time.perf_counter()
            tok = st.get(keys[b0:b0 + batch], device=dev)
            sync(dev)
            t1 = time.perf_counter()
            with torch.no_grad(), amp:
                head(tok)
            sync(dev)
            t_read, t_head = t_read + t1 - t0, t_head + time.perf_counter() - t1
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    res = {}
    for cond in ("full", "fg"):
        per = {}
        for s in range(9):
            pe = rng.standard_normal((500, 3, P["dim"])).astype(np.float32)
            de = rng.standard_normal((500, 3, P["dim"])).astype(np.float32)
            pm = np.ones((500, 3), bool)
            pm[: 500 * 2 // 3, 2] = False                     # 2/3 of the identities have 2 views
            per[f"s{s}"] = ssr_pa(*nearid_similarities(pe, de, pm, pm))
        res[cond] = pool_sources(per)
    metrics_s = time.perf_counter() - t0
    return {"grids_measured": n_grids, "batch": batch, "read_decode_s_per_grid": t_read / n_grids,
            "head_s_per_grid": t_head / n_grids, "metrics_s_9x500x2": metrics_s,
            "precision": "bf16 autocast" if dev.type == "cuda" else "float32"}


# ----------------------------------------------------------------------------- token precision
def codec_error(sets: dict, heads: dict) -> dict:
    """How much each store dtype moves tokens, embeddings and NearID decisions: per token set
    [n, N, D], a random-init MAP head's embeddings from exact vs decoded tokens; ``flip`` = share of
    triplets (a, b, c) whose order sign(s(a,b) - s(a,c)) changes."""
    out = {}
    for name, x in sets.items():
        torch.manual_seed(0)
        head = MAPHead(x.shape[-1], **heads[name]).eval()
        with torch.no_grad():
            e = F.normalize(head(x), dim=-1)
            s = e @ e.t()
            n = len(x)
            iu = torch.triu_indices(n, n, 1)
            d0 = s[:, :, None] - s[:, None, :]                    # [a, b, c]
            valid = torch.ones(n, n, n, dtype=torch.bool)
            idx = torch.arange(n)
            valid[idx, idx, :] = valid[idx, :, idx] = False
            valid[:, idx, idx] = False
            row = {}
            for dt in CODECS:
                xq = decode_tokens(encode_tokens(x, dt), x.shape[1], x.shape[2], dt)
                eq = F.normalize(head(xq), dim=-1)
                sq = eq @ eq.t()
                dq = sq[:, :, None] - sq[:, None, :]
                flips = ((d0 > 0) != (dq > 0)) & valid
                row[dt] = {"token_rel_err": float((xq - x).norm() / x.norm()),
                           "emb_cos_min": float((e * eq).sum(-1).min()),
                           "sim_max_abs_diff": float((sq - s)[iu[0], iu[1]].abs().max()),
                           "triplet_flip_rate": float(flips.sum() / valid.sum())}
        out[name] = {"shape": list(x.shape), "codecs": row}
    return out


def real_tokens(n: int, workdir=None) -> dict:
    """Token sets for :func:`codec_error`: EfficientNet-Lite0 (real ImageNet weights, the mini tap
    blocks.4) and a random-init so400m-geometry SigLIP tower of reduced width, on photo crops."""
    from nearid_lib.models import load_backbone
    from nearid_lib.models.backbones import SiglipEncoder
    from paper_scale_parts import siglip_config

    out, heads = {}, {}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        data = FakeData(Path(tmp), n, 384)
        imgs = [data.image(r) for r in data.rels]
        lite = load_backbone(get_profile("mini"), device="cpu")[0]   # the codec study runs on the CPU
        with torch.no_grad():
            out["efficientnet-lite0 blocks.4 (ImageNet weights)"] = lite(lite.preprocess.batch(imgs)).tokens.float()
        heads["efficientnet-lite0 blocks.4 (ImageNet weights)"] = {"num_heads": 8, "mlp_ratio": 2.0}
        torch.manual_seed(0)
        sig = SiglipEncoder("siglip2-so400m-patch14-384", "none", tiny=True, config=siglip_config(144, 6))
        with torch.no_grad():
            out["so400m geometry, width 144, 6 layers (random init)"] = sig(sig.preprocess.batch(imgs)).tokens.float()
        heads["so400m geometry, width 144, 6 layers (random init)"] = {"num_heads": 2, "mlp_ratio": 3.736}
    return out, heads
