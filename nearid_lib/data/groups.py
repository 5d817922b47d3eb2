"""A NearID dataset's images in groups: the unit of every token cache and of the store fill.

A group is ``<kind>@<split>``: kind ``positives`` (every view of the split's identities),
``dist:<source>`` (that source's distractors) or ``mtg`` (MTG originals and part edits).
:func:`image_groups` lists a dataset's groups, :func:`group_items` gives a group's images with the
mask each one is encoded with. Training reads the train groups of its sources; evaluation reads
val / test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .schema import NearIDData

__all__ = ["VIEWS", "SPLITS", "image_groups", "group_items"]

VIEWS = (1, 2, 3)

SPLITS = ("train", "val", "test")


def image_groups(data: NearIDData, splits: Sequence[str] = SPLITS, sources: Sequence[str] | None = None,
                 mtg: bool = True) -> list[str]:
    """Image groups ``<kind>@<split>``: kind = ``positives``, ``dist:<source>`` (default: every
    source), ``mtg`` (if present). One cache per group and variant, so training only encodes the
    train split of the training sources, and evaluation only val/test."""
    kinds = ["positives"] + [f"dist:{s}" for s in (data.sources if sources is None else sources)]
    if mtg and data.mtg is not None and len(data.mtg):
        kinds.append("mtg")
    return [f"{k}@{sp}" for k in kinds for sp in splits]


def group_items(data: NearIDData, group: str) -> tuple[list[str], list[str]]:
    """``(relpaths, masks)`` of every image in ``group`` = ``<kind>@<split>`` (table order, no empties).

    Distractor ``nimg_k`` uses ``mask_k`` (it is inpainted into that view's background and mask);
    MTG originals and their part edits use the image's object mask."""
    group, _, split = group.partition("@")
    if split not in SPLITS:
        raise KeyError(f"image group {group!r}: split {split!r} must be one of {SPLITS} (name kind@split)")
    sel = (data.positives["split"] == split).to_numpy()
    pos = data.positives[sel]
    rels: list[str] = []
    masks: list[str] = []
    if group == "positives":
        for k in VIEWS:
            ok = pos[f"img{k}"] != ""
            rels += pos.loc[ok, f"img{k}"].tolist()
            masks += pos.loc[ok, f"mask{k}"].tolist()
    elif group.startswith("dist:"):
        src = group[5:]
        if src not in data.distractors:
            raise KeyError(f"unknown distractor source {src!r}; valid: {', '.join(data.distractors)}")
        d = data.distractors[src][sel]
        for k in VIEWS:
            ok = (d[f"nimg{k}"] != "").to_numpy()
            rels += d.loc[ok, f"nimg{k}"].tolist()
            masks += pos.loc[ok, f"mask{k}"].tolist()
    elif group == "mtg":
        if data.mtg is None:
            raise KeyError("dataset has no mtg.csv")
        m = data.mtg[data.mtg["split"] == split]
        for j in (1, 2):
            for kind in ("original", "inpainted"):
                rels += m[f"image_{j}_{kind}"].tolist()
                masks += m[f"image_{j}_object_mask"].tolist()
    else:
        raise KeyError(f"unknown image group {group!r}; valid: positives, dist:<source>, mtg")
    return rels, masks
