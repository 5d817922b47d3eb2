"""Training rows of the NearID head (paper Section 4.1), one epoch at a time.

One training row = one anchor image a, its positives (the identity's other views, up to 2 slots) and
its distractors (one slot per training source: the distractor inpainted into the *anchor's* view, so
it shares the anchor's background). ``train.distractor_slots="per_view"`` builds rows as the
authors' training script does (their ``NearIDDataset`` in aligned mode, the "r7" preset of
:data:`nearid_lib.config.TRAIN_PRESETS`): one distractor slot per view, the one inpainted into that
view's background, its source drawn once per (identity, view) and kept over epochs. MTG part-edit pairs are interleaved as extra rows, repeated
``train.mtg_repeat`` times per epoch (paper Sec. 4.1: 4x): anchor = image_1_original (image_2 on
every other repeat), positive = the other original, distractors = the anchor's own part edit (same
background: a part-level near-identity distractor) and, given a second slot, the positive's part
edit, each with its oracle 1 - |part| / |object|.

MTG rows are ordinary rows: they enter L_disc and L_rank like NearID rows. The paper's "L_rank
without explicit regression targets" means no oracle-score *targets*, not "no L_disc": Table 6's
MTG-only row (58.3% NearID SSR, 49.0% MTG SSR) could not be trained without L_disc, and the authors'
MTG rows are ordinary rows (anchor, positive, two part edits). The oracles ride along for the
oracle-ranking ablations only (RankNet on oracle-ordered distractor pairs, Table 3), which is why
both part edits fill a row when there are two slots. ``rank_only`` stays available in the loss for
rows that should form ranking terms only; no row of the NearID protocol uses it.

The rows of epoch e and their order come from ``make_rng(seed, ..., e)``: deterministic, so a resumed
run sees exactly the rows it would have seen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..runtime.seeding import make_rng
from ..data.groups import image_groups

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["TrainRows", "train_sources", "epoch_rows", "steps_per_epoch", "train_groups",
           "random_positive_first"]

P_SLOTS = 2     # positive slots per row: the anchor's other views (a NearID identity has 2-3 views)


@dataclass
class TrainRows:
    """A table of training rows (numpy object arrays of relpaths; "" = empty slot)."""

    anchor: np.ndarray          # [n]
    anchor_mask: np.ndarray     # [n] mask relpath of the anchor (for "fg")
    positives: np.ndarray       # [n, P]
    pos_masks: np.ndarray       # [n, P]
    distractors: np.ndarray     # [n, K]
    dist_masks: np.ndarray      # [n, K]
    oracle: np.ndarray          # [n, K] float, NaN = unknown
    rank_only: np.ndarray       # [n] bool (MTG rows)

    def __len__(self) -> int:
        return len(self.anchor)

    def take(self, idx) -> "TrainRows":
        return TrainRows(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))



def train_sources(data: NearIDData, cfg: Profile) -> list[str]:
    """The distractor sources training reads: ``train.sources``, else the dataset's training sources."""
    src = list(cfg.train.sources) if cfg.train.sources else list(data.train_sources)
    bad = [s for s in src if s not in data.distractors]
    if bad:
        raise KeyError(f"train.sources {bad} not in the dataset's sources {data.sources}")
    return src


def _nearid_rows(data: NearIDData, sources: list[str], K: int, epoch: int, split: str, seed: int,
                 per_view: bool = False) -> list[tuple]:
    """One row per identity of ``split``: a random anchor view (``make_rng(seed, "anchor-view", epoch)``),
    the other views as positives, the anchor view's distractor of every training source; with
    ``per_view``, one distractor per view instead (its source from ``make_rng(seed, "view-source")``,
    the same every epoch: the authors key that draw on the row, not the epoch)."""
    sel = (data.positives["split"] == split).to_numpy()
    views_cols = [f"img{k}" for k in (1, 2, 3)]
    img = data.positives.loc[sel, views_cols].to_numpy(dtype=object)                    # [n, 3]
    msk = data.positives.loc[sel, [f"mask{k}" for k in (1, 2, 3)]].to_numpy(dtype=object)
    dst = np.stack([data.distractors[s].loc[sel, [f"nimg{k}" for k in (1, 2, 3)]].to_numpy(dtype=object)
                    for s in sources], axis=1) if sources else np.zeros((len(img), 0, 3), object)  # [n, S, 3]
    rng = make_rng(seed, "anchor-view", epoch)
    pick = make_rng(seed, "view-source").integers(max(1, len(sources)), size=(len(img), 3)) if per_view else None
    rows = []
    for j in range(len(img)):           # numpy rows: a pandas .iloc per row costs ~seconds per epoch
        views = [v for v in range(3) if img[j, v]]
        k = views[int(rng.integers(len(views)))]
        others = [v for v in views if v != k]
        p = [img[j, v] for v in others] + [""] * (P_SLOTS - len(others))
        pm = [msk[j, v] for v in others] + [""] * (P_SLOTS - len(others))
        if per_view:            # slot v: view v's distractor, so the anchor meets every view's background
            d = [dst[j, pick[j, v], v] if img[j, v] and sources else "" for v in range(3)] + [""] * (K - 3)
            dm = [msk[j, v] if x else "" for v, x in enumerate(d)]
        else:
            d = list(dst[j, :, k]) + [""] * (K - len(sources))
            dm = [msk[j, k] if x else "" for x in d]
        rows.append((img[j, k], msk[j, k], p, pm, d, dm, [np.nan] * K, False))
    return rows


def _mtg_rows(data: NearIDData, K: int, repeat: int, split: str) -> list[tuple]:
    """The MTG pairs of ``split`` as ordinary rows, ``repeat`` times (the anchor alternates)."""
    P = P_SLOTS
    m = data.mtg[data.mtg["split"] == split]
    recs = m.to_dict("records")
    rows = []
    for rep in range(int(repeat)):
        # alternate which image is the anchor: both backgrounds serve as matched context
        a, b = (1, 2) if rep % 2 == 0 else (2, 1)
        for r in recs:
            # Distractors: the anchor's own part edit and, where there is a second slot, the
            # positive's part edit, each with its oracle (1 - |part|/|object|). Two oracle-scored
            # distractors per row are what gives the oracle-ranking variants (RankNet on
            # oracle-ordered pairs) a pair to rank; with one, that term would be empty.
            edits = [a, b][:K]
            rows.append((r[f"image_{a}_original"], r[f"image_{a}_object_mask"],
                         [r[f"image_{b}_original"]] + [""] * (P - 1),
                         [r[f"image_{b}_object_mask"]] + [""] * (P - 1),
                         [r[f"image_{e}_inpainted"] for e in edits] + [""] * (K - len(edits)),
                         [r[f"image_{e}_object_mask"] for e in edits] + [""] * (K - len(edits)),
                         [float(r[f"oracle_{e}"]) for e in edits] + [np.nan] * (K - len(edits)),
                         False))
    return rows


def epoch_rows(data: NearIDData, cfg: Profile, epoch: int, split: str = "train") -> TrainRows:
    """The rows of ``epoch`` in training order (deterministic in ``(cfg.seed, epoch)``)."""
    tc = cfg.train
    sources = train_sources(data, cfg)
    per_view = tc.distractor_slots == "per_view"
    K = 3 if per_view else max(1, len(sources))
    rows: list[tuple] = []
    if tc.use_nearid:
        rows += _nearid_rows(data, sources, K, epoch, split, cfg.seed, per_view)
    if tc.use_mtg and data.mtg is not None:
        rows += _mtg_rows(data, K, tc.mtg_repeat, split)
    if not rows:
        raise ValueError(f"no training rows in split {split!r} (use_nearid={tc.use_nearid}, "
                         f"use_mtg={tc.use_mtg})")
    order = make_rng(cfg.seed, "order", epoch).permutation(len(rows))
    rows = [rows[i] for i in order]

    def col(i, dtype=object):
        return np.array([r[i] for r in rows], dtype=dtype)

    return TrainRows(col(0), col(1), col(2), col(3), col(4), col(5), col(6, float), col(7, bool))


def steps_per_epoch(n_rows: int, batch_size: int) -> int:
    """Full batches per epoch (the last partial batch is dropped: equal shards on every rank)."""
    return max(1, n_rows // batch_size)



def train_groups(data: NearIDData, cfg: Profile) -> list[str]:
    """The image groups (:func:`~nearid_lib.data.groups.image_groups`) training reads."""
    return image_groups(data, ("train",), train_sources(data, cfg), mtg=cfg.train.use_mtg)


def random_positive_first(batch: TrainRows, rng: np.random.Generator) -> TrainRows:
    """A copy of ``batch`` with, in every row, one valid positive drawn at random moved to slot 0:
    single-positive objectives (InfoNCE "1-pos", Table 3) use the first valid slot, and drawing it at
    random among the anchor's other views is the authors' convention (a fixed first slot would pair an
    anchor with the same view at every epoch)."""
    pos, pmk = batch.positives.copy(), batch.pos_masks.copy()
    for i in range(len(batch)):
        valid = np.flatnonzero(pos[i] != "")
        if len(valid) > 1:
            j = int(valid[int(rng.integers(len(valid)))])
            pos[i, [0, j]], pmk[i, [0, j]] = pos[i, [j, 0]], pmk[i, [j, 0]]
    return TrainRows(batch.anchor, batch.anchor_mask, pos, pmk, batch.distractors, batch.dist_masks,
                     batch.oracle, batch.rank_only)
