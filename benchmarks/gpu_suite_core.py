"""What every entry of the GPU suite shares: the run context, synchronised timing, peak memory, and
the synthetic images the entries read (crops of the photographs that ship with scikit-image,
PNG-encoded at the paper's sizes, so decoding and writing cost what they cost on real views)."""
from __future__ import annotations

import io
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image


@dataclass
class Ctx:
    """One suite run: ``dev`` and ``dtype`` (bf16 on CUDA, float32 on a CPU), ``tiny`` (the tiny
    sizes), ``S`` (the size table), ``work`` (a scratch folder), ``cores`` (CPU threads the entries
    may use) and ``shared`` (models kept between consecutive entries that build the same thing)."""

    dev: torch.device
    tiny: bool
    S: dict
    work: Path
    cores: int
    shared: dict = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.dev.type == "cuda"

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.cuda else torch.float32

    def share(self, key: str, build: Callable[[], Any]) -> tuple[Any, float]:
        """``(object, seconds to build it)``: built once and kept for the next entry that asks for
        ``key`` (the runner drops what the next entry does not ask for)."""
        if key not in self.shared:
            t0 = time.perf_counter()
            self.shared[key] = (build(), time.perf_counter() - t0)
            return self.shared[key][0], self.shared[key][1]
        return self.shared[key][0], 0.0


def sync(dev: torch.device) -> None:
    """Wait for the device's queued work (timings on CUDA end when the kernels do)."""
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(dev: torch.device, fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), seconds)``, synchronised on the device before and after."""
    sync(dev)
    t0 = time.perf_counter()
    out = fn()
    sync(dev)
    return out, time.perf_counter() - t0


def reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gb(dev: torch.device) -> float | None:
    """Peak device memory allocated since the last :func:`reset_peak` (GB); None on a CPU."""
    return round(torch.cuda.max_memory_allocated() / 1e9, 2) if dev.type == "cuda" else None


def free(ctx: Ctx | None = None) -> None:
    """Give back what the last entry left: the shared models too when ``ctx`` is passed."""
    import gc

    if ctx is not None:
        ctx.shared.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- synthetic images
_PHOTOS: list[np.ndarray] = []


def photo(i: int, px: int) -> Image.Image:
    """Image ``i``: a square crop of one of the photographs bundled with scikit-image, at ``px``."""
    if not _PHOTOS:
        import skimage.data as skd

        _PHOTOS.extend([skd.astronaut(), skd.chelsea(), skd.coffee(), skd.rocket(), skd.immunohistochemistry()])
    rng = np.random.default_rng(i)
    ph = _PHOTOS[i % len(_PHOTOS)]
    c = int(min(ph.shape[:2]) * rng.uniform(0.5, 0.9))
    y, x = int(rng.integers(0, ph.shape[0] - c + 1)), int(rng.integers(0, ph.shape[1] - c + 1))
    return Image.fromarray(ph[y:y + c, x:x + c]).resize((px, px), Image.BILINEAR)


def ellipse_mask(i: int, px: int) -> np.ndarray:
    """A bool object mask: an ellipse around the centre (a view's object)."""
    rng = np.random.default_rng(10_000 + i)
    yy, xx = np.mgrid[:px, :px]
    cy, cx = px * rng.uniform(0.35, 0.65, 2)
    ry, rx = px * rng.uniform(0.15, 0.3, 2)
    return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1


def png_bytes(im: Image.Image) -> bytes:
    """PNG encoding of ``im`` (what the released datasets hold per image)."""
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


class ViewsData:
    """Views (PNG) and object masks (PNG) on disk, read as :class:`~nearid_lib.data.NearIDData` reads
    them (``image(rel)`` decodes at every call, ``mask(rel)`` -> bool). ``n`` files are written from
    ``distinct`` images (the rest are byte copies: decoding cost is per file, not per content)."""

    def __init__(self, root: Path, n: int, px: int, distinct: int, threads: int):
        self.root = Path(root)
        (self.root / "img").mkdir(parents=True, exist_ok=True)

        def write(i: int) -> None:
            photo(i, px).save(self.root / f"img/{i}.png")
            Image.fromarray(ellipse_mask(i, px).astype(np.uint8) * 255).save(self.root / f"img/{i}_mask.png")

        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            list(pool.map(write, range(min(n, distinct))))
        for i in range(distinct, n):
            for suffix in (".png", "_mask.png"):
                src, dst = self.root / f"img/{i % distinct}{suffix}", self.root / f"img/{i}{suffix}"
                try:
                    os.link(src, dst)
                except OSError:          # a file system without hard links
                    shutil.copyfile(src, dst)
        self.rels = [f"img/{i}.png" for i in range(n)]
        self.masks = [f"img/{i}_mask.png" for i in range(n)]

    def image(self, rel: str) -> Image.Image:
        with Image.open(self.root / rel) as im:
            return im.convert("RGB")

    def mask(self, rel: str) -> np.ndarray:
        with Image.open(self.root / rel) as im:
            return np.asarray(im.convert("L")) > 127
