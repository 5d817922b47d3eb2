"""The image-grid figure types: attention overlays, score grids and plain image grids; each returns the
matplotlib ``Figure`` (:mod:`nearid_lib.plots`)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image

__all__ = ["attention_overlay_grid", "score_grid", "image_grid"]


def attention_overlay_grid(images: Sequence, attn: Mapping[str, Sequence[np.ndarray]], col_titles: Sequence[str],
                           title: str = ""):
    """NearID Figure 3 (left): rows = the input images and, per method, its attention map
    (``attn[name][k]`` a 2-D token grid, any size) upsampled and overlaid on image ``k``."""
    rows = 1 + len(attn)
    fig, axes = plt.subplots(rows, len(images), figsize=(2.3 * len(images), 2.3 * rows), squeeze=False)
    for k, im in enumerate(images):
        arr = np.asarray(im.convert("RGB"))
        axes[0, k].imshow(arr)
        axes[0, k].set_title(col_titles[k] if k < len(col_titles) else "")
        for r, (name, maps) in enumerate(attn.items(), start=1):
            a = np.asarray(maps[k], dtype=np.float64)
            a = (a - a.min()) / (np.ptp(a) + 1e-12)
            up = np.asarray(Image.fromarray((a * 255).astype(np.uint8)).resize(arr.shape[1::-1], Image.BILINEAR))
            axes[r, k].imshow(arr)
            axes[r, k].imshow(up / 255.0, cmap="inferno", alpha=0.55)
            if k == 0:
                axes[r, k].set_ylabel(name, rotation=90)
        for r in range(rows):
            axes[r, k].set_xticks([])
            axes[r, k].set_yticks([])
            axes[r, k].grid(False)
    axes[0, 0].set_ylabel("image")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def score_grid(rows: Sequence[Sequence], labels: Sequence[Sequence[str]], col_titles: Sequence[str],
               title: str = "", contours: Sequence[Sequence] | None = None):
    """NearID Figures 7/8: a grid of images with a text box of per-image scores under each.

    ``rows[r][c]`` a PIL image (None = empty cell), ``labels[r][c]`` its score text (e.g.
    "S=0.93\\nN=0.71"); ``contours[r][c]`` optional list of (bool mask, colour) drawn as outlines."""
    nr, nc = len(rows), max(len(r) for r in rows)
    fig, axes = plt.subplots(nr, nc, figsize=(2.4 * nc, 2.75 * nr), squeeze=False)
    for r in range(nr):
        for c in range(nc):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            im = rows[r][c] if c < len(rows[r]) else None
            if im is None:
                ax.axis("off")
                continue
            ax.imshow(np.asarray(im.convert("RGB")))
            if contours and contours[r] and c < len(contours[r]) and contours[r][c]:
                for m, col in contours[r][c]:
                    ax.contour(np.asarray(m, dtype=float), levels=[0.5], colors=[col], linewidths=1.2)
            txt = labels[r][c] if c < len(labels[r]) else ""
            if txt:
                ax.set_xlabel(txt, fontsize=8, family="monospace")
            if r == 0:
                ax.set_title(col_titles[c] if c < len(col_titles) else "")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def image_grid(cells: Sequence[Sequence], col_titles: Sequence[str], row_labels: Sequence[str] = (),
               title: str = "", cell_size: tuple[float, float] = (1.9, 2.0)):
    """A grid of images without axes: ``cells[r][c]`` an image file (path), a PIL image or None (an
    empty cell); ``col_titles`` over the first row, ``row_labels`` written up the left edge of each
    row, ``title`` over the figure; ``cell_size`` inches per cell (width, height)."""
    nr, nc = len(cells), len(col_titles)
    fig, axes = plt.subplots(nr, nc, figsize=(cell_size[0] * nc, cell_size[1] * nr), squeeze=False)
    for r in range(nr):
        for c in range(nc):
            ax = axes[r, c]
            ax.axis("off")
            cell = cells[r][c] if c < len(cells[r]) else None
            if cell is not None:
                ax.imshow(Image.open(cell) if isinstance(cell, (str, Path)) else cell)
            if r == 0:
                ax.set_title(col_titles[c], fontsize=8)
        if r < len(row_labels):
            axes[r, 0].text(-0.05, 0.5, row_labels[r], transform=axes[r, 0].transAxes, rotation=90,
                            ha="right", va="center", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
