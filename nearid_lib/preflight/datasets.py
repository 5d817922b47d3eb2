"""The preflight's data check, from metadata and ``id`` columns alone (no image is decoded or read):
the positives' published layout, columns and rows (parquet metadata and statistics), each distractor
repository row-aligned with them (the ``id`` column of its memory-mapped arrow shards), MTG's
columns, the splits (the positives' ``split`` column, the authors' split files, their agreement and
the official sizes), and the authors' clone: its commit and each file the run reads from it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import hub
from .. import mirror as M
from ..data.curation import NEARID_SPLITS
from ..data.eval_datasets import DBPP_DIRNAME, human_rating_rows, load_dreambenchpp
from ..data.released_schema import MTG_COLUMNS, positives_layout
from ..data.schema import DataError
from ..data.splits import SPLIT_VALUES, official_split_dir, read_split_files
from ..judge.plan import prompt_path
from ..paths import downloads_dir
from .findings import Report

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["check_datasets", "arrow_ids", "judge_on"]

_RELEASE = "Gorluxor/NearID"


def _redownload(repo: str, mirror: Path) -> str:
    return f"python -m nearid_lib.hub download {mirror} --only {repo}"


def arrow_ids(folder: Path) -> np.ndarray:
    """The ``id`` column of a ``save_to_disk`` split folder, shard by shard in the order its
    ``state.json`` lists them, memory-mapped (only the ``id`` buffers are touched). A shard that is
    missing or cut short raises ``OSError`` naming it."""
    import pyarrow as pa

    state = json.loads((folder / "state.json").read_text())
    out = []
    for entry in state.get("_data_files", []):
        f = folder / entry["filename"]
        if not f.is_file():
            raise OSError(f"shard {f.name} listed in state.json is missing")
        try:
            with pa.memory_map(str(f)) as src:
                table = pa.ipc.open_stream(src).read_all()
                out.append(np.asarray(table.column("id").to_numpy(zero_copy_only=False)))
        except (pa.ArrowInvalid, pa.ArrowIOError, KeyError) as err:
            raise OSError(f"shard {f.name} cannot be read (truncated?): {err}") from None
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _views_without_mask(files: list, layout) -> int | None:
    """Views (image cell present) without a mask cell, from the parquet statistics' null counts of
    ``images<k>.bytes`` and ``masks<k>.bytes`` (None when a file has no statistics)."""
    if layout.mask_prefix is None:
        return None
    nulls: dict[str, int] = {}
    for pf in files:
        md = pf.metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                if col.path_in_schema.endswith(".bytes"):
                    st = col.statistics
                    if st is None or not st.has_null_count:
                        return None
                    nulls[col.path_in_schema] = nulls.get(col.path_in_schema, 0) + st.null_count
    try:
        return sum(max(0, nulls[f"{layout.mask_prefix}{k}.bytes"] - nulls[f"{layout.image_prefix}{k}.bytes"])
                   for k in (1, 2, 3))
    except KeyError:
        return None


def _positives(cfg: Profile, rep: Report, mirror: Path) -> dict[str, Any] | None:
    import pyarrow.parquet as pq

    repo = cfg.world.nearid_repo
    folder = mirror / repo
    splits = hub.parquet_splits(folder) if folder.is_dir() else {}
    if not splits:
        return None                        # the mirror check names the absent repository
    if set(splits) != {"train"}:
        rep.problem("data", f"{repo}: splits {sorted(splits)}; the release publishes one split 'train'",
                    _redownload(repo, mirror))
        return None
    try:
        files = [pq.ParquetFile(f) for f in splits["train"]]
    except Exception as err:                                 # noqa: BLE001 - a torn parquet file
        rep.problem("data", f"{repo}: a parquet shard cannot be read (truncated?): {err}", _redownload(repo, mirror))
        return None
    names = files[0].schema_arrow.names
    cols = [c for c in ("id", "n_images", "split", "size1", "size2", "size3") if c in names]
    table = pq.read_table(splits["train"], columns=cols)
    ids = np.asarray(table.column("id").to_numpy(zero_copy_only=False)) if "id" in cols else None
    try:
        layout = positives_layout(names, repo)
    except DataError as err:
        rep.problem("data", str(err), f"{_redownload(repo, mirror)}; if the authors changed the card, "
                    f"nearid_lib.data.released_schema needs the new layout")
        return None if ids is None else {"ids": ids, "views": None, "split": None, "layout": None}
    absent = [c for c in layout.columns if c not in names]
    if absent:
        rep.note("data", f"{repo}: layout {layout.name} without the card's column(s) {absent} (not read by the run)")
    uniq, first = np.unique(ids, return_index=True)
    if len(uniq) != len(ids):
        dup = sorted(set(range(len(ids))) - set(first.tolist()))[0]
        rep.problem("data", f"{repo}, row {dup}, field 'id': duplicate id {ids[dup]}", _redownload(repo, mirror))
    n_img = np.asarray(table.column("n_images").to_numpy(zero_copy_only=False), dtype=float)
    split = ([str(v).strip().lower() for v in table.column("split").to_pylist()] if "split" in cols else None)
    if split is not None:
        bad = [i for i, v in enumerate(split) if v not in SPLIT_VALUES]
        if bad:
            rep.problem("data", f"{repo}, row {bad[0]}, field 'split': {split[bad[0]]!r} is not one of "
                        f"{sorted(SPLIT_VALUES)}", _redownload(repo, mirror))
            split = None
        else:
            split = [SPLIT_VALUES[v] for v in split]
    sizes = [np.prod(v) for c in ("size1", "size2", "size3") if c in cols
             for v in table.column(c).to_pylist() if v]
    if sizes:
        rep.facts["pixels_per_view"] = float(np.mean(sizes))
    no_mask = _views_without_mask(files, layout)
    rep.facts["views_without_mask"] = (int(np.nansum(n_img)) if layout.mask_prefix is None else no_mask)
    if layout.mask_prefix is None:
        rep.note("data", f"{repo}: the earlier layout ({layout.name}) ships no masks: CLIPSeg "
                         f"({cfg.world.mask_model}) masks every view")
    elif no_mask:
        rep.note("data", f"{repo}: {no_mask} view(s) without a released mask: CLIPSeg ({cfg.world.mask_model}) "
                         f"masks those")
    rep.plan("data", f"{repo}: layout {layout.name} (card at {layout.commit[:7]}), {len(ids)} rows, "
                     f"{int(np.nansum(n_img))} views")
    return {"ids": ids, "views": n_img, "split": split, "layout": layout}


def _distractors(cfg: Profile, rep: Report, mirror: Path, ids: np.ndarray | None) -> None:
    """Each distractor repository readable, with its columns, row-aligned with the positives' ``ids``
    (None: the positives could not be read; alignment is then not checked)."""
    for s in cfg.world.nearid_sources:
        repo = f"{cfg.world.nearid_repo}-{s}"
        folder = mirror / repo
        if not folder.is_dir():
            continue                       # the mirror check names it
        parts = hub.arrow_splits(folder)
        if set(parts) != {"train"}:
            rep.problem("data", f"{repo}: save_to_disk splits {sorted(parts)}; expected one split 'train' "
                        f"(train/state.json, train/dataset_info.json)", _redownload(repo, mirror))
            continue
        split_dir = Path(parts["train"])
        try:
            info = json.loads((split_dir / "dataset_info.json").read_text())
            feats = list((info.get("features") or {}).keys())
            missing = [c for c in ("id", "nimg1", "nimg2", "nimg3") if c not in feats]
            if missing:
                rep.problem("data", f"{repo}: missing column(s) {missing}; has {feats}", _redownload(repo, mirror))
                continue
            did = arrow_ids(split_dir)
        except (OSError, json.JSONDecodeError) as err:
            rep.problem("data", f"{repo}: {err}", _redownload(repo, mirror))
            continue
        if ids is None:
            continue
        if len(did) != len(ids):
            rep.problem("data", f"{repo}: {len(did)} rows, {cfg.world.nearid_repo} has {len(ids)}; the release is "
                        f"row-aligned", _redownload(repo, mirror))
            continue
        diff = np.flatnonzero(did != ids)
        if len(diff):
            i = int(diff[0])
            rep.problem("data", f"{repo}, row {i}, field 'id': {did[i]} but {cfg.world.nearid_repo} row {i} has id "
                        f"{ids[i]} ({len(diff)} rows differ); the distractors must be row-aligned",
                        _redownload(repo, mirror))


def _mtg(cfg: Profile, rep: Report, mirror: Path) -> None:
    import pyarrow.parquet as pq

    repo = cfg.world.mtg_repo
    folder = mirror / repo if repo else None
    splits = hub.parquet_splits(folder) if folder is not None and folder.is_dir() else {}
    for split, files in splits.items():
        try:
            names = pq.ParquetFile(files[0]).schema_arrow.names
            rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        except Exception as err:                             # noqa: BLE001
            rep.problem("data", f"{repo}: split {split}: a parquet shard cannot be read: {err}", _redownload(repo, mirror))
            continue
        rep.facts.setdefault("mtg_pairs_by_split", {})[split] = int(rows)
        missing = [c for c in MTG_COLUMNS if c not in names]
        if missing:
            rep.problem("data", f"{repo}: split {split} lacks column(s) {missing}", _redownload(repo, mirror))
        elif split == "test":
            rep.plan("data", f"{repo}: test split, {rows} pairs")
    if splits and "test" not in splits:
        rep.problem("data", f"{repo}: no 'test' split (MTG's metrics use it); has {sorted(splits)}", _redownload(repo, mirror))


def judge_on(cfg: Profile) -> bool:
    """Whether the profile runs the VLM judge (``eval.vlm_judge`` set, and not ``none``)."""
    j = cfg.eval.vlm_judge
    return bool(j) and str(j).strip().lower() not in ("none", "off", "false")


def _splits_and_release(cfg: Profile, rep: Report, mirror: Path, pos: dict | None) -> None:
    clone = downloads_dir() / _RELEASE.split("/")[1]
    fix_clone = f"python -m nearid_lib.hub download {mirror} --downloads {downloads_dir()} --only {_RELEASE}"
    if clone.is_dir():
        head = M.git_head(clone)
        want = hub.GIT_COMMITS.get(_RELEASE)
        if want and head != want:
            rep.note("release", f"{clone} is at {head or 'no commit'}, the recorded commit is {want[:12]} "
                                f"(update: {fix_clone})")
        rec = M.read_record(downloads_dir(), _RELEASE)
        for bad in M.check_record(clone, rec) if rec else []:
            rep.problem("release", f"{clone}: {bad}", fix_clone)
    else:
        rep.note("release", f"the authors' release is not at {clone} (NEARID_DOWNLOADS={downloads_dir()}): "
                            f"no split files, no released DreamBench++ scores (gate 'nearid_release')")
    ratings = clone / "dreambench_plus" / "ratings"
    if clone.is_dir() and not (ratings / "data_human_rating").is_dir():
        rep.problem("release", f"{ratings}: the per-image DreamBench++ scores are missing from the clone", fix_clone)
    if judge_on(cfg):
        pf = prompt_path(cfg.judge.prompt_file)
        if pf and not pf.is_file():
            rep.problem("judge", f"judge.prompt_file={pf} does not exist (the judge would stop hours into the run)",
                        f"{fix_clone} (the authors' template is evaluation/vl_template_v2.txt), or unset judge.prompt_file")
        elif not pf:
            rep.note("judge", "the judge runs with this project's prompt (judge.prompt_file unset); the authors' "
                              f"Qwen3-VL rows use their template: {clone}/evaluation/vl_template_v2.txt")
    if pos is None:
        return
    n = len(pos["ids"])
    try:
        d = official_split_dir(cfg.world.split_dir)
        files = read_split_files(d, n)[0].tolist() if d is not None else None
    except DataError as err:
        rep.problem("splits", str(err), f"check the authors' split files out again: {fix_clone}")
        files = None
        d = "bad"
    col = pos["split"]
    if col is not None and files is not None:
        diff = [i for i, (a, b) in enumerate(zip(col, files)) if a != b]
        if diff:
            rep.problem("splits", f"{cfg.world.nearid_repo}, row {diff[0]}, field 'split': {col[diff[0]]!r}, but the "
                        f"split files in {d} put row {diff[0]} in {files[diff[0]]!r} ({len(diff)} rows differ)",
                        f"{fix_clone}; or re-download {cfg.world.nearid_repo}")
    split = col if col is not None else files
    if split is None and d is None:
        rep.problem("splits", "neither the positives' split column nor the authors' split files: the run would draw "
                    "its own split (not the official one; the released weights' row flagged)", fix_clone)
        return
    if split is None:
        return
    counts = tuple(split.count(s) for s in ("train", "val", "test"))
    if n == sum(NEARID_SPLITS) and counts != NEARID_SPLITS:
        rep.problem("splits", f"official split sizes are {NEARID_SPLITS} (train/val/test); found {counts}", fix_clone)
    rep.plan("splits", f"train/val/test = {counts[0]}/{counts[1]}/{counts[2]} "
                       f"({'split column' if col is not None else 'split files'})")
    views = pos["views"]
    rep.facts["views_by_split"] = {s: int(np.nansum([v for v, t in zip(views, split) if t == s]))
                                   for s in ("train", "val", "test")}
    # the resource ledger's sizes (nearid_lib.steps.ledger.Sizes.from_facts): identities and 3-view ones per split
    rep.facts["ids_by_split"] = dict(zip(("train", "val", "test"), counts))
    rep.facts["three_view_by_split"] = {s: int(sum(1 for v, t in zip(views, split) if t == s and v >= 3))
                                        for s in ("train", "val", "test")}
    rep.facts["test_views"] = [int(v) if v == v else 0 for v, t in zip(views, split) if t == "test"]
    n_gen = dbpp_generations(cfg)
    if n_gen is not None:
        rep.facts["dbpp_generations"] = n_gen


def dbpp_generations(cfg: Profile) -> int | None:
    """DreamBench++'s human-rated generations (distinct reference and generated image pairs, what the
    judge is asked about), counted from the download the profile reads; None without one."""
    if not cfg.eval.dbpp_human:
        return None
    root = Path(cfg.eval.dbpp_root).expanduser() if cfg.eval.dbpp_root else downloads_dir() / DBPP_DIRNAME
    if not root.is_dir():
        return None
    try:
        hum = human_rating_rows(load_dreambenchpp(root))
    except DataError:
        return None                      # the run's own reader names the problem
    return int(len(hum[["reference", "image"]].drop_duplicates()))


def check_datasets(cfg: Profile, rep: Report) -> None:
    """The data part of the preflight (module docstring)."""
    mirror = hub.hub_dir()
    if mirror is None or not mirror.is_dir():
        return                             # the mirror check says why
    pos = _positives(cfg, rep, mirror)
    _distractors(cfg, rep, mirror, None if pos is None else pos["ids"])
    if pos is not None and pos["layout"] is not None:
        rep.facts["views"] = int(np.nansum(pos["views"]))
        rep.facts["rows"] = len(pos["ids"])
    _mtg(cfg, rep, mirror)
    _splits_and_release(cfg, rep, mirror, pos if pos is not None and pos["layout"] is not None else None)
