"""Contact sheets and statistics of a loaded NearID dataset (used by ``01_data_curation``).

Sheets are uint8 RGB arrays (tiles of the stored images, masks outlined where useful) so the
notebook only has to ``plt.imshow`` and save them; statistics are a long table
(section, name, split, value) that the notebook writes to CSV.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image

from .schema import NearIDData

__all__ = ["tile", "identity_sheet", "mtg_sheet", "grid_sheet", "gallery_sheet", "dataset_stats"]


def _arr(im: Image.Image, size: int) -> np.ndarray:
    return np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR))


def _mask_rgb(m: np.ndarray, size: int) -> np.ndarray:
    return _arr(Image.fromarray(m.astype(np.uint8) * 255), size)


def tile(rows: list[list[np.ndarray | None]], size: int, pad: int = 2) -> np.ndarray:
    """Grid of equally sized tiles; ``None`` leaves a blank (white) cell."""
    n_r, n_c = len(rows), max(len(r) for r in rows)
    out = np.full((n_r * (size + pad) + pad, n_c * (size + pad) + pad, 3), 255, np.uint8)
    for i, r in enumerate(rows):
        for j, t in enumerate(r):
            if t is not None:
                y, x = pad + i * (size + pad), pad + j * (size + pad)
                out[y:y + size, x:x + size] = t
    return out


def identity_sheet(data: NearIDData, ids: list[str], size: int = 112) -> tuple[np.ndarray, list[str]]:
    """One row per identity: img1..3, then each source's distractor of view 1.
    Returns (sheet, column labels)."""
    pos = data.positives.set_index("id")
    rows = []
    for iid in ids:
        r = pos.loc[iid]
        i = int(np.flatnonzero(data.positives.id.to_numpy() == iid)[0])
        row = [(_arr(data.image(r[f"img{k}"]), size) if r[f"img{k}"] else None) for k in (1, 2, 3)]
        row += [_arr(data.image(data.distractors[s].at[i, "nimg1"]), size) for s in data.sources]
        rows.append(row)
    return tile(rows, size), ["view 1", "view 2", "view 3"] + [f"n:{s}" for s in data.sources]


def mtg_sheet(data: NearIDData, n: int = 4, size: int = 112) -> tuple[np.ndarray, list[str]]:
    """Per MTG pair: original 1, edited 1, part mask 1, original 2, edited 2, part mask 2."""
    rows = []
    for _, r in data.mtg.head(n).iterrows():
        row = []
        for k in (1, 2):
            row += [_arr(data.image(r[f"image_{k}_original"]), size),
                    _arr(data.image(r[f"image_{k}_inpainted"]), size),
                    _arr(Image.open(data.path(r[f"image_{k}_part_mask"])), size)]
        rows.append(row)
    return tile(rows, size), ["orig 1", "edit 1", "part 1", "orig 2", "edit 2", "part 2"]


def grid_sheet(data: NearIDData, anchor: str, grid: str, size: int = 96) -> np.ndarray:
    """Rows: identity level; columns: factor level of ``grid`` for one anchor."""
    g = data.grids[(data.grids.anchor_id == anchor) & (data.grids.grid == grid)]
    L_i, L_f = g.identity_level.max() + 1, g.factor_level.max() + 1
    rows = [[None] * L_f for _ in range(L_i)]
    for _, r in g.iterrows():
        rows[r.identity_level][r.factor_level] = _arr(data.image(r.path), size)
    return tile(rows, size)


def gallery_sheet(data: NearIDData, n_ids: int = 4, n_gallery: int = 5, size: int = 96) -> np.ndarray:
    """Per FPR identity: its references, a gap, then gallery images."""
    rows = []
    for name in list(dict.fromkeys(data.fpr_train.name))[:n_ids]:
        refs = data.fpr_train[data.fpr_train.name == name].file_path.tolist()
        gal = data.fpr_gallery[data.fpr_gallery.name == name].file_path.tolist()[:n_gallery]
        rows.append([_arr(data.image(p), size) for p in refs] + [None] +
                    [_arr(data.image(p), size) for p in gal])
    return tile(rows, size)


def _n_distractors(data: NearIDData, sources, split: str) -> int:
    """Distractor images of ``sources`` in ``split`` that exist (a non-empty ``nimg<k>``)."""
    n = 0
    for src in sources:
        d = data.distractors[src]
        d = d[d["split"] == split]
        n += int(sum((d[f"nimg{k}"].fillna("").astype(str) != "").sum() for k in (1, 2, 3) if f"nimg{k}" in d))
    return n


def dataset_stats(data: NearIDData, n_diff_rows: int = 50) -> pd.DataFrame:
    """Long table (section, name, split, value): sizes per split, views, classes, object size,
    and per distractor source the mean |difference| to the positive inside / outside the mask
    (0..1; on the first ``n_diff_rows`` identities of each split).

    Distractor images are counted where they exist: a source outside ``world.train_sources`` has
    none in the train split (:func:`~nearid_lib.data.draws.source_splits`). Training reads the train
    split of the training sources only, which ``distractor_images_training_sources`` counts (in the
    train split: the distractors the head is trained on); ``distractor_images`` counts every source."""
    rows = []
    ids = data.identities
    for split in ("train", "val", "test"):
        s = ids[ids.split == split]
        rows += [("size", "identities", split, len(s)),
                 ("size", "positive_images", split, int(s.n_views.sum())),
                 ("size", "three_view_identities", split, int((s.n_views == 3).sum())),
                 ("size", "distractor_images", split, _n_distractors(data, data.sources, split)),
                 ("size", "distractor_images_training_sources", split,
                  _n_distractors(data, data.train_sources, split))]
        for c, n in s.class_name.value_counts().sort_index().items():
            rows.append(("class", str(c), split, int(n)))
    for src in data.sources:
        rows.append(("source", src, "all", int(src in data.train_sources)))
    if data.mtg is not None:
        for split, g in data.mtg.groupby("split"):
            rows += [("mtg", "pairs", split, len(g)),
                     ("mtg", "oracle_mean", split, float(g[["oracle_1", "oracle_2"]].to_numpy().mean()))]
    for name, grids in (("grids", data.grids), ("graded", data.graded)):
        if grids is not None:
            rows.append((name, "images", "test", len(grids)))
            rows.append((name, "anchors", "test", int(grids.anchor_id.nunique())))
    if data.fpr_train is not None:
        rows += [("fpr", "identities", "test", int(data.fpr_train.name.nunique())),
                 ("fpr", "species", "test", int(data.fpr_train.species.nunique())),
                 ("fpr", "reference_images", "test", len(data.fpr_train)),
                 ("fpr", "gallery_images", "test", len(data.fpr_gallery))]
    pos = data.positives
    for split in ("train", "val", "test"):
        idx = np.flatnonzero(pos.split.to_numpy() == split)[:n_diff_rows]
        if not len(idx):
            continue
        fg, ext = [], []
        d_in, d_out = {s: [] for s in data.sources}, {s: [] for s in data.sources}
        for i in idx:
            p = np.asarray(data.image(pos.img1[i]), np.float32) / 255
            m = data.mask(pos.mask1[i])
            fg.append(m.mean())
            ys, xs = np.nonzero(m)
            ext.append(max(ys.max() - ys.min(), xs.max() - xs.min()) + 1)   # bbox long side, px
            for s in data.sources:
                if not data.distractors[s].nimg1[i]:      # a source absent from this split
                    continue
                q = np.asarray(data.image(data.distractors[s].nimg1[i]), np.float32) / 255
                d = np.abs(p - q).mean(-1)
                d_in[s].append(d[m].mean())
                d_out[s].append(d[~m].mean() if (~m).any() else 0.0)
        rows.append(("object", "mask_fraction_mean", split, float(np.mean(fg))))
        rows.append(("object", "bbox_long_side_px_mean", split, float(np.mean(ext))))
        for s in data.sources:
            if d_in[s]:
                rows.append(("distractor_diff_in_mask", s, split, float(np.mean(d_in[s]))))
                rows.append(("distractor_diff_outside_mask", s, split, float(np.mean(d_out[s]))))
    return pd.DataFrame(rows, columns=["section", "name", "split", "value"])
