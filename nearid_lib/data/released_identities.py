"""The identities of the NearID release written to disk: views, object masks and distractors,
block by block, over any number of processes.

NearID's 19,386 identities are written in fixed **blocks** of consecutive rows (``block``
identities, default :data:`BLOCK`). Block ``b`` belongs to rank ``b % world`` of a launch
(``torchrun`` / ``accelerate launch``, one process per GPU: :mod:`nearid_lib.data.curate_step`), so
the work is dealt without coordination. Within a block:

1. the rows are read from the (memory-mapped) datasets by the calling thread;
2. their images are decoded and converted by ``io_workers`` threads (Pillow releases the GIL
   while it decodes and encodes);
3. each view's foreground mask is the release's own (``masks1..3`` of today's card, under the rule
   of :mod:`~nearid_lib.data.released_masks`); the views without one (the earlier card has none)
   are masked by **one** masker call per block (CLIPSeg batched on the GPU, ``masker.batch_size``
   images per forward), and no call at all when every view of the block has its mask;
4. views, masks and distractors are written (PNG, atomically) by the threads, and one line per
   identity is appended to the rank's own progress log ``_progress/identities-r<rank>.jsonl``.

A masker call always sees every unmasked view of a whole block, whatever the number of processes
and whatever was finished before a restart (a resumed block is decoded and masked whole, only its
missing identities written), so the masks -- and every byte written -- do not depend on how the work was
dealt: tested in ``tests/test_released_parallel.py``. Progress logs of every rank and of earlier
launches are read together, so a restart with another number of processes resumes too.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from .released_masks import released_mask
from .released_schema import EARLIER, PositivesLayout, write_png, save_mask, schema_rgb, pil_from_value
from .schema import DataError

__all__ = ["BLOCK", "Masker", "identity_blocks", "progress_records", "write_identities"]

BLOCK = 16
"""Identities per block: one masker call (about 40 views) and one unit of resumable work."""

Masker = Callable[[list, list], list]


def identity_blocks(n: int, block: int = BLOCK, rank: int = 0, world: int = 1) -> list[range]:
    """The row ranges of ``n`` identities in blocks of ``block`` that rank ``rank`` of ``world``
    writes (block ``b`` to rank ``b % world``)."""
    if block < 1 or world < 1 or not 0 <= rank < world:
        raise ValueError(f"identity_blocks: need block >= 1 and 0 <= rank < world (got block={block}, "
                         f"rank={rank}, world={world})")
    return [range(s, min(n, s + block)) for b, s in enumerate(range(0, n, block)) if b % world == rank]


def progress_records(prog: Path) -> dict[str, dict]:
    """Finished identities by id, from every progress log under ``prog`` (every rank, every earlier
    launch; a torn last line, left by a killed process, is skipped)."""
    out: dict[str, dict] = {}
    for f in sorted(Path(prog).glob("identities*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[str(rec["id"])] = rec
    return out


def _append(log: Path, rec: dict) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(json.dumps(rec, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _n_views(row: Mapping, i: int, rid: int, name: str, prefix: str) -> list[int]:
    """The views a row has, checked against its ``n_images`` (2-view rows have an empty third)."""
    present = [k for k in (1, 2, 3) if _present(row.get(f"{prefix}{k}"))]
    where = f"dataset {name}, row {i} (id {rid})"
    if present[:2] != [1, 2]:
        raise DataError(f"{where}, field '{prefix}{1 if 1 not in present else 2}': identity has fewer "
                        f"than two views (NearID needs >= 2 positives)")
    n = row.get("n_images")
    if n is not None and int(n) != len(present):
        raise DataError(f"{where}, field 'n_images': {int(n)} but {len(present)} image(s) present "
                        f"({[f'{prefix}{k}' for k in present]})")
    return present


def _present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, dict):
        return bool(value.get("bytes") or value.get("path"))
    return True


def _decode(i: int, row: Mapping, pos_name: str, layout: PositivesLayout, rule: str
            ) -> tuple[list[int], dict[int, Image.Image], str, dict[int, np.ndarray | None], dict[int, str]]:
    """Views, decoded RGB images, the mask prompt, and per view the released foreground mask (None:
    the masker makes it) with its status (:func:`~nearid_lib.data.released_masks.released_mask`)."""
    rid = int(row["id"])
    where = lambda f: f"dataset {pos_name}, row {i} (id {rid}), field {f!r}"  # noqa: E731
    pre = layout.image_prefix
    views = _n_views(row, i, rid, pos_name, pre)
    ims = {k: schema_rgb(pil_from_value(row[f"{pre}{k}"], where(f"{pre}{k}")), where(f"{pre}{k}")) for k in views}
    prompt = str(row.get("category_description") or row.get("category") or "object")
    masks: dict[int, np.ndarray | None] = {k: None for k in views}
    status = {k: "missing" for k in views}
    if layout.mask_prefix is not None and rule != "clipseg":
        for k in views:
            f = f"{layout.mask_prefix}{k}"
            masks[k], status[k] = released_mask(row.get(f), where(f), ims[k].size, rule)
    return views, ims, prompt, masks, status


def _write(root: Path, i: int, row: Mapping, split: str, dist_rows: Mapping[str, tuple[str, Mapping]],
           views: list[int], ims: dict[int, Image.Image], masks: Sequence, pos_name: str,
           sources: Sequence[str], prefix: str = "img") -> dict:
    """Write the views, masks and distractors of one identity; its table rows (``sources[j]``:
    where the mask of ``views[j]`` came from, ``released`` or ``clipseg``)."""
    rid = int(row["id"])
    where = lambda f: f"dataset {pos_name}, row {i} (id {rid}), field {f!r}"  # noqa: E731
    sid = str(rid)
    prow = {"id": sid, "split": split}
    for k in (1, 2, 3):
        prow[f"img{k}"] = prow[f"mask{k}"] = prow[f"mask_source{k}"] = ""
    mask_area = {}
    for k, m, src in zip(views, masks, sources):
        m = np.asarray(m, dtype=bool)
        if m.shape != (ims[k].size[1], ims[k].size[0]) or not m.any():
            raise DataError(f"{where(f'{prefix}{k}')}: the mask model returned a mask of shape {m.shape} "
                            f"(image {ims[k].size[::-1]}, {int(m.sum())} pixels set)")
        prow[f"mask_source{k}"] = src
        prow[f"img{k}"] = write_png(root, f"pos/{sid}_{k}.png", ims[k])
        prow[f"mask{k}"] = save_mask(root, f"mask/{sid}_{k}.png", m)
        mask_area[k] = float(m.mean())
    drows = {}
    for s, (dname, drow) in dist_rows.items():
        dwhere = lambda f: f"dataset {dname}, row {i} (id {rid}), field {f!r}"  # noqa: E731
        out = {"id": sid, "split": split}
        for k in (1, 2, 3):
            out[f"nimg{k}"] = ""
            if k not in views:
                continue
            im = pil_from_value(drow.get(f"nimg{k}"), dwhere(f"nimg{k}"))
            if im is None:
                raise DataError(f"{dwhere(f'nimg{k}')}: view {k} of the identity exists but has no distractor")
            im = schema_rgb(im, dwhere(f"nimg{k}"))
            if im.size != ims[k].size:
                # generators at other resolutions (e.g. Flux_1024): Lanczos to the view's size
                im = im.resize(ims[k].size, Image.LANCZOS)
            out[f"nimg{k}"] = write_png(root, f"dist/{s}/{sid}_{k}.png", im)
        drows[s] = out
    ident = {"id": sid, "split": split, "class_name": str(row.get("category") or ""),
             "description": str(row.get("category_description") or ""), "n_views": len(views),
             "objaverse_id": str(row.get("objaverse_id") or ""), "quality": str(row.get("quality") or ""),
             "source_row": int(i)}
    return {"identity": ident, "positives": prow, "distractors": drows,
            "mask_area": [mask_area[k] for k in views]}


def write_identities(root: Path, pos, dists: Mapping[str, tuple[str, Any]], splits: Sequence[str],
                     masker: Masker | None, pos_name: str, rank: int = 0, world: int = 1, block: int = BLOCK,
                     io_workers: int = 4, progress: bool = False, layout: PositivesLayout = EARLIER,
                     mask_rule: str = "authors") -> int:
    """Write rank ``rank``'s blocks of identities (module docstring) that no progress log lists yet.

    ``pos``: the positives dataset (rows with undecoded images) in the published ``layout``;
    ``dists[source] = (repo name, dataset)`` row-aligned with it; ``splits[i]``: the split of row
    ``i``; ``mask_rule``: how a released mask becomes a foreground
    (:mod:`~nearid_lib.data.released_masks`); ``masker`` makes the masks of the views without one
    (None: every view must have its released mask). Returns the number of identities written by
    this call. A bad row raises :class:`DataError` naming repo, row, id and field; everything
    finished before it stays logged."""
    prog = root / "_progress"
    done = set(progress_records(prog))
    log = prog / f"identities-r{rank}.jsonl"
    ids = [str(int(v)) for v in pos["id"]]              # the id column alone (no image bytes read)
    blocks = identity_blocks(len(pos), block, rank, world)
    todo = [b for b in blocks if any(ids[i] not in done for i in b)]
    n_mine = sum(len(b) for b in blocks)
    bar = tqdm(total=n_mine, initial=n_mine - sum(len(b) for b in todo),
               desc=f"released/identities [rank {rank}/{world}]", disable=not progress)
    written = 0
    with ThreadPoolExecutor(max_workers=max(1, int(io_workers))) as pool:
        for b in todo:
            rows = [pos[i] for i in b]
            drows = [{s: (name, d[i]) for s, (name, d) in dists.items()} for i in b]
            decoded = list(pool.map(lambda ir: _decode(ir[0], ir[1], pos_name, layout, mask_rule), zip(b, rows)))
            # the views without a released mask, in block order: one masker call for all of them
            todo_v = [(j, k) for j, (views, _, _, masks, _) in enumerate(decoded) for k in views if masks[k] is None]
            fell: dict[tuple[int, int], bool] = {}
            if todo_v:
                if masker is None:
                    j, k = todo_v[0]
                    st = decoded[j][4][k]
                    f = f"{layout.mask_prefix or layout.image_prefix}{k}"
                    raise DataError(f"dataset {pos_name}, row {b[j]} (id {ids[b[j]]}), field {f!r}: "
                                    f"{'no released mask' if st == 'missing' else 'the released mask is empty'} "
                                    f"({len(todo_v)} view(s) of this block); pass masker= "
                                    f"(nearid_lib.data.masks.ObjectMasker) to compute them")
                made = list(masker([decoded[j][1][k] for j, k in todo_v], [decoded[j][2] for j, _ in todo_v]))
                if len(made) != len(todo_v):
                    raise DataError(f"dataset {pos_name}, rows {b[0]}-{b[-1]}: the mask model returned "
                                    f"{len(made)} masks for {len(todo_v)} views")
                # which views needed the masker's fallback rule (ObjectMasker.last_fallback), kept
                # per identity so the manifest counts every rank's masks
                flags = list(getattr(masker, "last_fallback", None) or [False] * len(todo_v))
                for (j, k), m, f in zip(todo_v, made, flags):
                    decoded[j][3][k] = m
                    fell[(j, k)] = bool(f)
            per_id = [[masks[k] for k in views] for views, _, _, masks, _ in decoded]
            src = [["clipseg" if (j, k) in fell else "released" for k in views]
                   for j, (views, *_rest) in enumerate(decoded)]
            fb = [[fell.get((j, k), False) for k in views] for j, (views, *_rest) in enumerate(decoded)]
            why = [{str(k): st[k] for k in views if (j, k) in fell or st[k] == "released-resized"}
                   for j, (views, _, _, _, st) in enumerate(decoded)]
            need = [j for j, i in enumerate(b) if ids[i] not in done]
            futs = [pool.submit(_write, root, b[j], rows[j], str(splits[b[j]]), drows[j], decoded[j][0],
                                decoded[j][1], per_id[j], pos_name, src[j], layout.image_prefix) for j in need]
            for j, f in zip(need, futs):
                _append(log, {"id": ids[b[j]], "written_at": time.time(), "mask_fallback": fb[j],
                              "mask_source": src[j], "mask_status": why[j], **f.result()})
                written += 1
            if bar is not None:
                bar.update(len(b))
    if bar is not None:
        bar.close()
    return written
