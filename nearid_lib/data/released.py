"""The released datasets, as their authors publish them, materialised into the NearID on-disk
schema (``nearid_lib.data.schema``) so that every later notebook is profile-blind.

Published schemas (read from the authors' dataset cards, ``scripts/upload_nearid_datasets.py`` of
``Gorluxor/NearID``; :mod:`~nearid_lib.data.released_schema`):

- ``Aleksandar/NearID`` (positives, parquet): one ``train`` split of 19,386 rows, in one of two
  published layouts recognised by their columns (:func:`positives_layout`): **today's card**
  (1a2cc71: ``id`` (int64, sparse, shared with every distractor repo), ``category``,
  ``category_description``, ``images1..3`` (``images3`` empty for 2-view identities), their
  foreground masks ``masks1..3``, ``n_images``, ``objaverse_id``, ``dino_01/02/12``,
  ``aesthetics1..3``, ``size1..3``, ``prompts1..3``, ``filenames1..3``, ``quality``, ``id_safe`` and
  the official ``split``) or **the earlier card** (560b774: ``img1..3``, no masks, no split). Every
  column that is not an image is kept, as published, in ``released_columns.csv``.
- ``Aleksandar/NearID-<source>`` for the nine sources of :data:`RELEASED_SOURCES`: ``save_to_disk``
  folders (``train/data-0000k-of-0000n.arrow``), read memory-mapped
  (:func:`nearid_lib.hub.load_hub_dataset`); ``id``, metadata and the distractors ``nimg1..3``,
  **row-aligned** with the positives (same ``id`` at every row: checked).
- ``abdo-eldesokey/mtg-dataset``: ``train`` and ``test`` splits of ``image_{1,2}_original``,
  ``image_{1,2}_inpainted``, ``image_{1,2}_object_mask``, ``image_{1,2}_part_mask``; the oracle is
  the paper's ``1 - |Ωp| / |Ωo|`` over masks > 0 (:mod:`~nearid_lib.data.released_mtg`).

Decided here, deterministically, and recorded in the manifest:

- **Foreground masks** (FG-only evaluation, Table 7; the FG token store; the judge's FG pairs;
  role-aware masking): the release's own mask of each view under the authors' rule
  (:mod:`~nearid_lib.data.released_masks`, ``world.released_masks``); CLIPSeg
  (:class:`nearid_lib.data.masks.ObjectMasker`, prompted with the identity's
  ``category_description``) only for a view without one, loaded only then. ``positives.csv`` says
  per view where its mask came from (``mask_source1..3``: ``released`` / ``clipseg``), the manifest
  counts them, and every table's provenance names them.
- **Splits** (:mod:`nearid_lib.data.splits`): the official partition -- the positives' ``split``
  column, else the authors' ``splits/{train,val,test}.json`` row positions (``world.split_dir``, or
  ``$NEARID_DOWNLOADS/NearID/splits`` from the GitHub release); only when neither exists
  :func:`assign_splits`, a documented deterministic rule giving ``world.n_val_ids`` /
  ``world.n_test_ids`` identities, flagged as not official in the manifest and every table.
- **Training sources** follow NearID Table 5 (``world.train_sources``: Flux, Flux_1024, Qwen,
  Qwen_1328); the other sources are unseen.

Materialising is resumable: one job per identity writes its images atomically and appends a line to
``_progress/identities.jsonl``; a restart skips finished identities; tables and ``manifest.json`` are
written last. Bad rows raise :class:`~nearid_lib.data.schema.DataError` naming repo, row, id and field.
Every hub read goes through :mod:`nearid_lib.hub` (a local mirror with ``NEARID_HUB_DIR``).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import hub
from ..io_utils import write_csv, write_json
from ..models import resolve_device
from ..paths import data_dir
from .eval_datasets import load_fpr
from .masks import MASK_RULE, ObjectMasker, masker_fingerprint
from .released_identities import BLOCK, Masker, progress_records, write_identities
from .released_masks import RULES as MASK_RULES
from .released_masks import LazyMasker, mask_cells
from .released_mtg import materialise_mtg, mtg_oracle
from .released_schema import (
    DISTRACTOR_COLUMNS,
    POSITIVE_COLUMNS,
    POSITIVE_LAYOUTS,
    RELEASED_SOURCES,
    TABLE5_TRAIN_SOURCES,
    PositivesLayout,
    check_columns,
    no_decode,
    one_split,
    distractor_features,
    mtg_features,
    pil_from_value,
    positive_features,
    positives_layout,
)
from .schema import SCHEMA_VERSION, DataError
from .splits import (
    RULE_NOTE,
    assign_splits,
    official_split_dir,
    read_split_files,
    resolve_official_splits,
    split_digest,
)

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["materialise_released", "load_released_from_hub", "assign_splits", "read_split_files",
           "pil_from_value", "POSITIVE_COLUMNS", "DISTRACTOR_COLUMNS", "RELEASED_SOURCES",
           "TABLE5_TRAIN_SOURCES", "positive_features", "distractor_features", "mtg_features",
           "positives_layout", "POSITIVE_LAYOUTS", "mtg_oracle", "await_records"]


# --------------------------------------------------------------------------- NearID
def _id_index(ds, name: str) -> dict[int, int]:
    """``id -> row`` of a NearID repo; a duplicate id is an error naming the rows."""
    index: dict[int, int] = {}
    for i, v in enumerate(ds["id"]):
        if v is None:
            raise DataError(f"dataset {name}, row {i}, field 'id': missing id")
        v = int(v)
        if v in index:
            raise DataError(f"dataset {name}, row {i}, field 'id': duplicate id {v} (also row {index[v]})")
        index[v] = i
    return index


def _aligned(pos, dist, name: str, pos_name: str) -> list[int]:
    """Row of ``dist`` for each positives row. The release is row-aligned (the guide: the split
    files' row positions apply unchanged to every distractor repo), so row ``i`` of ``dist`` must
    carry the ``id`` of row ``i`` of the positives; the first row where it does not is an error."""
    pid, did = list(pos["id"]), list(dist["id"])
    if len(did) != len(pid):
        raise DataError(f"dataset {name}: {len(did)} rows, {pos_name} has {len(pid)}; the release is row-aligned")
    for i, (a, b) in enumerate(zip(pid, did)):
        if b is None or int(b) != int(a):
            raise DataError(f"dataset {name}, row {i}, field 'id': {b} but {pos_name} row {i} has id {a}; "
                            f"the distractor repos must be row-aligned with the positives")
    return list(range(len(pid)))


def _materialise_nearid(root: Path, positives: Any, distractors: Mapping[str, Any], masker: Masker | None,
                        pos_name: str, splits: pd.Series | None, split_rule: dict, progress: bool,
                        fingerprint: dict, shard: tuple[int, int] = (0, 1), barrier: Callable[[], None] | None = None,
                        io_workers: int = 4, mask_rule: str = "authors"
                        ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame], dict] | None:
    """Write the identities (:func:`~nearid_lib.data.released_identities.write_identities`, this
    process's share ``shard = (rank, world)``) and return their tables; ``None`` on ranks other than 0,
    which only write and return. ``barrier()`` (a launch's) is met once, after rank 0 has checked the
    progress folder against ``fingerprint`` (bounded work). After the writes no collective waits:
    after a resume one rank's share can outlast the others' by hours, longer than a collective's
    timeout, so rank 0 waits for the other ranks' progress records on disk instead
    (:func:`await_records`; a rank that fails stops the launch)."""
    rank, world = shard
    barrier = barrier or (lambda: None)
    pos = no_decode(one_split(positives, pos_name))
    layout = positives_layout(pos.column_names, pos_name)
    _id_index(pos, pos_name)
    dists = {}
    for s, obj in distractors.items():
        name = f"{pos_name}-{s}"
        d = no_decode(one_split(obj, name))
        check_columns(d, name, ["id", "nimg1", "nimg2", "nimg3"])
        _aligned(pos, d, name, pos_name)
        dists[s] = (name, d)
    meta = pd.DataFrame({c: pos[c] for c in ("id", "objaverse_id", "category_description")})
    if splits is None:
        splits = assign_splits(meta, split_rule["n_val"], split_rule["n_test"], split_rule["seed"])
    prog = root / "_progress"
    fp_path = prog / "fingerprint.json"
    if rank == 0:
        old = json.loads(fp_path.read_text()) if fp_path.exists() else None
        if old != fingerprint:         # another release, split or mask model: start over
            for sub in ("_progress", "pos", "mask", "dist", "distractors"):
                shutil.rmtree(root / sub, ignore_errors=True)
        write_json(fingerprint, fp_path)
        for f in prog.glob("failed_rank*"):      # an earlier launch's failures: this launch starts again
            f.unlink()
    barrier()
    if rank != 0 and (not fp_path.exists() or json.loads(fp_path.read_text()) != fingerprint):
        raise DataError(f"{fp_path}: rank {rank} found another dataset's progress folder than rank 0 wrote "
                        f"(two launches on one output folder?)")
    try:
        write_identities(root, pos, dists, list(map(str, splits)), masker, pos_name, rank=rank, world=world,
                         io_workers=io_workers, progress=progress, layout=layout, mask_rule=mask_rule)
    except BaseException as err:
        # rank 0 waits for this rank's records on disk: say on disk that none will come
        (prog / f"failed_rank{rank}").write_text(f"{type(err).__name__}: {err}")
        raise
    if rank != 0:
        return None
    order = [str(int(v)) for v in pos["id"]]
    recs = await_records(prog, order) if world > 1 else progress_records(prog)
    missing = [k for k in order if k not in recs]
    if missing:
        raise DataError(f"{prog}: {len(missing)} identities were not written (first: id {missing[0]}); "
                        f"rerun to resume")
    ids = pd.DataFrame([recs[k]["identity"] for k in order])
    prows = pd.DataFrame([recs[k]["positives"] for k in order])
    drows = {s: pd.DataFrame([recs[k]["distractors"][s] for k in order],
                             columns=["id", "split", "nimg1", "nimg2", "nimg3"]) for s in dists}
    return ids, prows, drows, {**_mask_stats([recs[k] for k in order], masker, mask_rule, layout),
                               "released_columns": _released_columns(pos, layout)}


def await_records(prog: Path, order: Sequence[str], poll_s: float = 10.0, say_every_s: float = 300.0,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict:
    """The progress records of every identity of ``order``, read from ``prog`` once the other ranks of
    a launch have written them: polled every ``poll_s`` seconds (a file-system wait, no collective and
    so no collective timeout), the number still missing said every ``say_every_s``. A rank that fails
    says so on disk (``failed_rank<r>``) and the wait stops with a :class:`DataError`; a rank killed
    from outside ends the launch (torchrun stops every rank), and the wait with it."""
    t0 = last = clock()
    while True:
        recs = progress_records(prog)
        left = sum(1 for k in order if k not in recs)
        if not left:
            return recs
        failed = sorted(Path(prog).glob("failed_rank*"))
        if failed:
            raise DataError(f"{prog}: {failed[0].name.removeprefix('failed_')} failed "
                            f"({failed[0].read_text().strip()[:200]}); {left} identities not written: rerun to resume")
        if clock() - last >= say_every_s:
            last = clock()
            print(f"curate: rank 0 waits for {left} identities of the other ranks ({(last - t0) / 60:.0f} min)",
                  flush=True)
        sleep(poll_s)


def _mask_stats(recs: Sequence[dict], masker: Masker | None, rule: str, layout: PositivesLayout) -> dict:
    """The manifest's ``masks`` record: where every view's mask came from (``source``: released /
    clipseg, with counts), why CLIPSeg was needed, the rule, and the CLIPSeg masks' statistics."""
    areas = np.array([a for r in recs for a in r["mask_area"]], dtype=float)
    src = [x for r in recs for x in r.get("mask_source", ["clipseg"] * len(r["mask_area"]))]
    status = [st for r in recs for st in (r.get("mask_status") or {}).values()]
    fell = [f for r in recs for f in r.get("mask_fallback", [])]
    n_clip = src.count("clipseg")
    return {"source": {"released": src.count("released"), "clipseg": n_clip},
            "clipseg_reasons": {"no released mask": n_clip - status.count("empty"),
                                "released mask empty after the rule": status.count("empty")},
            "resized_released": status.count("released-resized"),
            "rule": rule, "rule_text": MASK_RULES[rule], "layout": layout.name,
            "model": _masker_id(masker) if n_clip else None,
            "clipseg_rule": MASK_RULE if n_clip else None,
            "views": int(areas.size), "mean_area": float(areas.mean()) if areas.size else None,
            "median_area": float(np.median(areas)) if areas.size else None,
            "fallbacks": {"images": n_clip, "fallback": int(sum(fell))}}


def _released_columns(pos, layout: PositivesLayout) -> pd.DataFrame:
    """Every column of the positives that is not an image (the card's metadata: ``dino_*``,
    ``aesthetics*``, ``size*``, ``filenames*``, ``id_safe``, the published ``split``, and whatever
    else the repository carries), as published, one row per identity; lists as JSON."""
    import datasets

    cols = [c for c, f in pos.features.items() if not isinstance(f, datasets.Image)]
    df = pos.select_columns(cols).to_pandas()
    for c in df.columns:
        if df[c].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).any():
            df[c] = [json.dumps(np.asarray(v).tolist()) if v is not None else "" for v in df[c]]
    return df


def _masker_id(masker: Masker | None) -> str | None:
    """What keys a masker: an :class:`ObjectMasker`'s weights and rule, or a user masker's
    ``fingerprint`` attribute (a :class:`LazyMasker` says what it would load), else its class."""
    if masker is None:
        return None
    if isinstance(masker, ObjectMasker):
        return masker_fingerprint(masker)
    return str(getattr(masker, "fingerprint", type(masker).__qualname__))


def materialise_released(out_root: str | os.PathLike, positives: Any = None,
                         distractors: Mapping[str, Any] | None = None, mtg: Any = None,
                         train_sources: Sequence[str] | None = None, fpr: str | os.PathLike | None = None,
                         positives_name: str = "Aleksandar/NearID", profile: str = "paper", seed: int = 0,
                         masker: Masker | None = None, split_dir: str | os.PathLike | None = None,
                         n_val: int = 100, n_test: int = 500, progress: bool = False,
                         provenance: Mapping[str, Any] | None = None, shard: tuple[int, int] = (0, 1),
                         barrier: Callable[[], None] | None = None, io_workers: int = 4,
                         mask_rule: str = "authors") -> Path:
    """Write the released data into the NearID schema at ``out_root`` (``manifest.json`` last).

    ``positives`` / ``distractors[source]`` / ``mtg``: ``datasets.Dataset`` / ``DatasetDict``
    objects or ``save_to_disk`` folders in the published schemas (module docstring; the positives in
    either published layout, :func:`positives_layout`); ``fpr``: a folder of FPR CSVs
    (:func:`~nearid_lib.data.eval_datasets.load_fpr`). A view's foreground mask is the release's own
    under ``mask_rule`` (:mod:`~nearid_lib.data.released_masks`); ``masker(images, prompts)``
    returns one bool mask per image for the views without one (required when some view has none).
    Splits (:mod:`~nearid_lib.data.splits`): the positives' ``split`` column, else the split files
    of ``split_dir`` (the authors' ``{train,val,test}.json`` row positions; checked against the column
    when both exist), else :func:`assign_splits` with ``n_val``/``n_test``, flagged as not official. ``train_sources`` defaults to NearID Table 5's (those present).
    A complete dataset made from the same inputs and settings is returned untouched; an interrupted
    one resumes. ``provenance`` (e.g. the hub revisions read) is stored in the manifest.

    Over several processes (:mod:`~nearid_lib.data.curate_step`): every rank calls this with its
    ``shard = (rank, world)`` and the launch's ``barrier``; each writes its blocks of identities
    (:mod:`~nearid_lib.data.released_identities`, ``io_workers`` threads decoding and writing), and
    rank 0 alone then writes the tables, MTG, FPR and the manifest. The bytes written do not depend
    on ``world``."""
    root = Path(out_root)
    root.mkdir(parents=True, exist_ok=True)
    distractors = dict(distractors or {})
    ts = (list(train_sources) if train_sources is not None
          else [s for s in TABLE5_TRAIN_SOURCES if s in distractors])
    unknown = set(ts) - set(distractors)
    if unknown:
        raise DataError(f"train_sources {sorted(unknown)} are not among the distractor datasets "
                        f"{sorted(distractors)}")
    if distractors and positives is None:
        raise DataError("distractor datasets given without their positives dataset")
    if mask_rule not in MASK_RULES:
        raise DataError(f"world.released_masks={mask_rule!r}: valid rules are {sorted(MASK_RULES)}")
    layout = None
    if positives is not None:
        pos1 = no_decode(one_split(positives, positives_name))
        layout = positives_layout(pos1.column_names, positives_name)
        cells = mask_cells(pos1, layout)
        unmasked = cells["views"] if mask_rule == "clipseg" else cells["without_mask"]
        if unmasked and masker is None:
            why = ("the rule 'clipseg' ignores the release's masks" if mask_rule == "clipseg" else
                   f"the {layout.name} layout has no mask column" if layout.mask_prefix is None else
                   "their mask cells are empty")
            raise DataError(f"dataset {positives_name}: {unmasked} of {cells['views']} views have no released "
                            f"object mask ({why}); pass masker= (nearid_lib.data.masks.ObjectMasker) to compute them")
    splits, split_info = (None, None) if positives is None else resolve_official_splits(
        one_split(positives, positives_name), positives_name, split_dir)
    if split_info is None:
        split_info = {"source": "rule", "official": False, "rule": "assign_splits (objaverse_id/description "
                      "groups, sha256 order)", "n_val": int(n_val), "n_test": int(n_test), "seed": int(seed),
                      "note": RULE_NOTE}
    # a user's own masker (any callable) is keyed by its ``fingerprint`` attribute or its class
    masker_fp = _masker_id(masker)
    fingerprint = {"schema_version": SCHEMA_VERSION, "positives": positives_name,
                   "layout": layout.name if layout else None, "sources": sorted(distractors),
                   "split": split_info, "masker": masker_fp, "mask_rule": mask_rule,
                   "mask_batch": f"blocks of {BLOCK} identities"}
    man = root / "manifest.json"
    if man.exists():
        try:
            old = json.loads(man.read_text())
        except json.JSONDecodeError:
            old = {}
        if old.get("complete") and old.get("fingerprint") == fingerprint and \
                old.get("has_mtg") == (mtg is not None) and old.get("has_fpr") == (fpr is not None):
            return root
        if shard[0] == 0:
            man.unlink(missing_ok=True)                 # incomplete until we finish
    counts: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if positives is not None:
        tables = _materialise_nearid(
            root, positives, distractors, masker, positives_name, splits,
            {"n_val": n_val, "n_test": n_test, "seed": seed}, progress, fingerprint, shard, barrier, io_workers,
            mask_rule)
        if tables is None:                              # another rank writes the tables
            return root
        ids, pos, dists, mask_stats = tables
        write_csv(ids, root / "identities.csv")
        write_csv(pos, root / "positives.csv")
        # the release's own metadata columns, as published (beside identities.csv, row for row)
        write_csv(mask_stats.pop("released_columns"), root / "released_columns.csv")
        for s, d in dists.items():
            write_csv(d, root / "distractors" / f"{s}.csv")
        counts["identities"] = {s: int((ids.split == s).sum()) for s in ("train", "val", "test")}
        split_info = {**split_info, "sha256": split_digest(ids["split"]), "counts": counts["identities"]}
        counts["positive_images"] = int(ids.n_views.sum())
        counts["distractor_images"] = int(ids.n_views.sum()) * len(dists)
        extra["masks"] = mask_stats
        extra["positives_layout"] = {"name": layout.name, "card_commit": layout.commit,
                                     "columns": list(pos1.column_names)}
    if shard[0] != 0:
        return root
    write_json({"sources": list(distractors), "train_sources": ts}, root / "sources.json")
    if mtg is not None:
        m, extra["mtg_oracle"] = materialise_mtg(root, mtg)
        write_csv(m, root / "mtg.csv")
        counts["mtg_pairs"] = {s: int((m.split == s).sum()) for s in sorted(set(m.split))}
    if fpr is not None:
        tabs = load_fpr(fpr)
        for key, df in tabs.items():
            df = df.copy()
            for c in ("file_path", "ref_path", "mask_path"):
                if c in df.columns:
                    df[c] = [os.path.relpath(p, root) if p else "" for p in df[c]]
            write_csv(df, root / "fpr" / f"{key}_data.csv")
        counts["fpr_identities"] = int(tabs["train"]["name"].nunique())
    write_json({"complete": True, "schema_version": SCHEMA_VERSION, "profile": profile,
                "seed": int(seed), "counts": counts, "generator": "released", "fingerprint": fingerprint,
                "split": split_info, "train_sources": ts, "has_mtg": mtg is not None,
                "has_fpr": fpr is not None, "provenance": dict(provenance or {}), **extra}, man)
    return root


def load_released_from_hub(cfg: Profile, out_root: str | os.PathLike | None = None,
                           masker: Masker | None = None, progress: bool = True, shard: tuple[int, int] = (0, 1),
                           barrier: Callable[[], None] | None = None, device: str | None = None,
                           io_workers: int = 4) -> Path:
    """Paper profile: read ``cfg.world.nearid_repo``, one distractor repo per source of
    ``cfg.world.nearid_sources`` and ``cfg.world.mtg_repo`` through :mod:`nearid_lib.hub` (the local
    mirror when ``NEARID_HUB_DIR`` is set) and materialise them at ``out_root`` (default
    ``data_dir(profile)/"nearid"``). Masks: the release's own (``world.released_masks``), and for
    the views without one ``masker`` (default: the profile's ``world.mask_model`` through
    :class:`~nearid_lib.data.masks.ObjectMasker` on ``device`` or the profile's, loaded on the first
    view that needs it: never when the release masks every view). ``shard``/``barrier``/``io_workers``:
    :func:`materialise_released` over several processes (:mod:`~nearid_lib.data.curate_step`)."""
    w = cfg.world
    out_root = Path(out_root) if out_root is not None else data_dir(cfg.name) / "nearid"
    pos = hub.load_hub_dataset(w.nearid_repo)
    dists = {s: hub.load_hub_dataset(f"{w.nearid_repo}-{s}") for s in w.nearid_sources}
    mtg = hub.load_hub_dataset(w.mtg_repo) if w.mtg_repo else None
    if masker is None:
        dev = device or _device(cfg)
        masker = LazyMasker(lambda: ObjectMasker.from_pretrained(w.mask_model, device=dev),
                            f"ObjectMasker({w.mask_model}@{hub.peek_revision(w.mask_model)}; {MASK_RULE})")
    train = [s for s in w.train_sources if s in dists]
    return materialise_released(out_root, pos, dists, mtg, train_sources=train, positives_name=w.nearid_repo,
                                profile=cfg.name, seed=cfg.seed, masker=masker,
                                split_dir=official_split_dir(w.split_dir),
                                n_val=w.n_val_ids, n_test=w.n_test_ids, progress=progress,
                                provenance={"hub": hub.reads()}, shard=shard, barrier=barrier,
                                io_workers=io_workers, mask_rule=w.released_masks)


def _device(cfg: Profile) -> str:
    return str(resolve_device(getattr(cfg, "device", "auto")))
