"""Readers of released benchmark folders in simple documented layouts, with absolute paths:

- FPR CSV folders (``train_data.csv``, ``gallery_data.csv``, optional ``generated_data.csv``;
  columns name, species, file_path, ref_path [, mask_path] [, method]): :func:`load_fpr`, through
  the reader of that layout (:mod:`nearid_lib.data.fpr_layout`).
- DreamBench++ in its publishers' layout (``yuangpeng/dreambench_plus``: the evaluation data, the
  7 methods' samples and the human / GPT rating zips, unpacked side by side as the release's own
  scripts read them): :func:`load_dreambenchpp`, the human ratings behind NearID Table 2 / Figure 4
  and ID-Sim's DreamBench++ benchmark.
- Subjects2k (hub dataset ``chaenayo/Subjects2k`` in its published schema, ID-Sim's public
  benchmark): :func:`load_subjects2k`.

Bad rows raise :class:`~nearid_lib.data.schema.DataError` naming dataset, row and field.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import hub
from .fpr_layout import FPRLayoutError, check_disjoint, read_fpr_table, resolve_paths
from .schema import DataError

__all__ = ["load_fpr", "DreamBenchPP", "load_dreambenchpp", "DBPP_CATEGORIES", "DBPP_METHOD_DIRS",
           "dbpp_collection_id", "human_rating_rows", "dbpp_mean_ratings", "DBPP_DIRNAME", "DOWNLOAD_STEPS",
           "SUBJECTS2K_COLUMNS", "load_subjects2k"]


def load_fpr(folder: str | os.PathLike, check_files: bool = True) -> dict[str, pd.DataFrame]:
    """Read an FPR CSV folder -> {"train", "gallery"[, "generated"]} with absolute paths.

    The one reader of the layout reads and validates each table
    (:func:`nearid_lib.data.fpr_layout.read_fpr_table`: columns, empty cells, duplicate images, files;
    ``generated_data.csv`` must have a ``method`` column), with relative paths resolved against
    ``folder``, and checks the protocol's rules: gallery images are not also references, every
    reference identity has gallery images (:func:`~nearid_lib.data.fpr_layout.check_disjoint`).
    Columns are kept as written (strings). Bad
    input raises :class:`~nearid_lib.data.schema.DataError` naming the file, the CSV line(s) and
    the field."""
    folder = Path(folder)
    out = {}
    try:
        for key in ("train", "gallery", "generated"):
            p = folder / f"{key}_data.csv"
            if not p.exists():
                if key == "generated":
                    continue
                raise DataError(f"dataset FPR {p.name}: file missing in {folder}")
            df = read_fpr_table(p, key, check_files=check_files, root=folder, numeric_metadata=False)
            out[key] = resolve_paths(df)
        check_disjoint(out["train"], out["gallery"], str(folder / "train_data.csv"),
                       str(folder / "gallery_data.csv"))
    except FPRLayoutError as err:
        raise DataError(f"dataset FPR: {err}") from None
    return out


# --------------------------------------------------------------------------- DreamBench++
# The category folders of ``data/images`` and the prefix each gets in a collection id
# (dreambench_plus/dreambench_plus_dataset.py: animal and human are "live_subject_<category>").
DBPP_CATEGORIES = {"animal": "live_subject_animal", "human": "live_subject_human", "object": "object",
                   "style": "style"}

# Rating-file method key (the release's ``method.replace(" ", "_").replace("-", "_").lower()``) ->
# folder under ``samples/`` (dreambench_plus/constants.py ``METHODS``, the "Full Samples with 7
# methods" zip).
DBPP_METHOD_DIRS = {
    "textual_inversion_sd": "textual_inversion_sd_gs7_5_step100_seed42_torch_float16",
    "dreambooth_sd": "dreambooth_sd_gs7_5_step100_seed42_torch_float16",
    "dreambooth_lora_sdxl": "dreambooth_lora_sdxl_gs7_5_step100_seed42_torch_float16",
    "blip_diffusion": "blip_diffusion_gs7_5_step100_seed42_torch_float16",
    "emu2": "emu2_gs3_step50_seed42_torch_bfloat16",
    "ip_adapter_plus_vit_h_sdxl": "ip_adapter_plus_vit_h_sdxl_scale0_6_gs7_5_step100_seed42_torch_float16",
    "ip_adapter_vit_g_sdxl": "ip_adapter_vit_g_sdxl_scale0_6_gs7_5_step100_seed42_torch_float16",
}

_RATING_COLS = ["method", "rater", "group", "subject", "prompt_index", "reference", "image", "score"]


@dataclass
class DreamBenchPP:
    """DreamBench++ as released: ``subjects`` (one row per reference image: ``subject`` = the
    release's collection id ``<category prefix>_<NN>_<name>``, ``category``, ``name``, ``image``
    (absolute path), ``prompts``: its 9 prompts) and ``ratings`` in long format (``method`` = rating
    key, ``rater`` = human | gpt, ``group`` = the human rater group (``group1``/``group2``; the GPT
    setting for gpt rows), ``subject``, ``prompt_index``, ``reference`` and ``image`` (absolute
    paths of the reference and of the method's generated ``<prompt_index>_0.jpg``), ``score``: the
    concept-preservation rating 0-4, NaN where the release has none)."""

    subjects: pd.DataFrame
    ratings: pd.DataFrame


def dbpp_collection_id(category: str, index: str, name: str) -> str:
    """The release's collection id of a subject: ``<prefix>_<NN>_<name lower-cased, spaces -> _>``."""
    if category not in DBPP_CATEGORIES:
        raise DataError(f"dataset DreamBench++: unknown category {category!r}; valid: {sorted(DBPP_CATEGORIES)}")
    return "_".join([DBPP_CATEGORIES[category], index, name.lower().replace(" ", "_")])


def _dbpp_subjects(root: Path) -> pd.DataFrame:
    data = root / "data"
    img_dir, cap_dir = data / "images", data / "captions"
    for d in (img_dir, cap_dir):
        if not d.is_dir():
            raise DataError(f"dataset DreamBench++: folder {d} missing (the evaluation data zip, "
                            f"data.zip of yuangpeng/dreambench_plus, unpacks to data/images and data/captions)")
    rows = []
    for img in sorted(img_dir.glob("*/*.jpg")):
        cat, idx = img.parent.name, img.stem
        rel = f"{cat}/{idx}"
        cap = cap_dir / cat / f"{idx}.txt"
        if not cap.exists():
            raise DataError(f"dataset DreamBench++ data/images/{rel}.jpg: caption file data/captions/{rel}.txt missing")
        lines = [ln.strip() for ln in cap.read_text(encoding="utf-8").splitlines()]
        if not lines or not lines[0]:
            raise DataError(f"dataset DreamBench++ data/captions/{rel}.txt, line 1: empty subject name")
        if cat not in DBPP_CATEGORIES:
            raise DataError(f"dataset DreamBench++ data/images/{rel}.jpg: unknown category folder {cat!r}; "
                            f"valid: {sorted(DBPP_CATEGORIES)}")
        rows.append({"subject": dbpp_collection_id(cat, idx, lines[0]), "category": cat, "name": lines[0],
                     "image": str(img.resolve()), "prompts": [x for x in lines[1:] if x]})
    if not rows:
        raise DataError(f"dataset DreamBench++: no reference images data/images/<category>/<NN>.jpg in {root}")
    extra = sorted({f"{p.parent.name}/{p.stem}" for p in cap_dir.glob("*/*.txt")}
                   - {f"{r['category']}/{Path(r['image']).stem}" for r in rows})
    if extra:
        raise DataError(f"dataset DreamBench++ data/captions/{extra[0]}.txt: no matching image data/images/{extra[0]}.jpg")
    df = pd.DataFrame(rows)
    dup = df.subject[df.subject.duplicated()]
    if len(dup):
        raise DataError(f"dataset DreamBench++ data/captions: collection id {dup.iloc[0]!r} occurs twice")
    return df


def _score(v, where: str) -> float:
    if v is None:
        return float("nan")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DataError(f"{where}: score {v!r} is not a number")
    v = float(v)
    if not math.isnan(v) and not 0.0 <= v <= 4.0:
        raise DataError(f"{where}: score {v} outside the release's 0-4 scale")
    return v


def _split_key(key: str, where: str) -> tuple[str, int]:
    cid, sep, pi = str(key).rpartition("-")
    if not sep or not cid or not pi.isdigit():
        raise DataError(f"{where}: key {key!r} is not '<collection_id>-<prompt_index>'")
    return cid, int(pi)


def _read_json(p: Path, rel: str):
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(f"dataset DreamBench++ {rel}: cannot read JSON ({err})") from None


def _human_rows(root: Path) -> list[dict]:
    """Human ratings: ``data_human_rating/raw_data/<group>/*-<method>.json`` = {key: [cp, pf]} (what
    the release's merge_data.py reads), else the merged ``merged_data/<group>/<method>-cp.json``."""
    base = root / "data_human_rating"
    rows = []
    raw, merged = base / "raw_data", base / "merged_data"
    if raw.is_dir():
        for p in sorted(raw.glob("*/*.json")):
            rel = p.relative_to(root).as_posix()
            method = p.stem.rpartition("-")[2]
            if "-" not in p.stem or not method:
                raise DataError(f"dataset DreamBench++ {rel}: file name must end in '-<method>.json'")
            data = _read_json(p, rel)
            if not isinstance(data, dict):
                raise DataError(f"dataset DreamBench++ {rel}: expected an object {{key: [cp, pf]}}")
            for key, v in data.items():
                where = f"dataset DreamBench++ {rel}, key {key!r}, field 'cp' (value[0])"
                if not isinstance(v, (list, tuple)) or len(v) < 1:
                    raise DataError(f"dataset DreamBench++ {rel}, key {key!r}: expected [cp, pf], got {v!r}")
                cid, pi = _split_key(key, f"dataset DreamBench++ {rel}")
                rows.append({"method": method, "rater": "human", "group": p.parent.name, "subject": cid,
                             "prompt_index": pi, "score": _score(v[0], where), "_file": rel})
    elif merged.is_dir():
        for p in sorted(merged.glob("*/*-cp.json")):
            rel = p.relative_to(root).as_posix()
            data = _read_json(p, rel)
            for key, v in data.items():
                cid, pi = _split_key(key, f"dataset DreamBench++ {rel}")
                rows.append({"method": p.stem[:-3], "rater": "human", "group": p.parent.name, "subject": cid,
                             "prompt_index": pi, "score": _score(v, f"dataset DreamBench++ {rel}, key {key!r}"),
                             "_file": rel})
    return rows


def _gpt_rows(root: Path, setting: str = "concept_preservation_full") -> list[dict]:
    """GPT-4o ratings of ``data_gpt_rating/<setting>/``: per-sample ``<method>/*.json`` (fields
    collection_id, prompt_index, score) or the merged ``<method>.json`` {key: score}."""
    d = root / "data_gpt_rating" / setting
    rows = []
    if not d.is_dir():
        return rows
    merged = {p.stem for p in d.glob("*.json")}
    for p in sorted(d.glob("*.json")):
        rel = p.relative_to(root).as_posix()
        for key, v in _read_json(p, rel).items():
            cid, pi = _split_key(key, f"dataset DreamBench++ {rel}")
            rows.append({"method": p.stem, "rater": "gpt", "group": setting, "subject": cid, "prompt_index": pi,
                         "score": _score(v, f"dataset DreamBench++ {rel}, key {key!r}"), "_file": rel})
    for p in sorted(d.glob("*/*.json")):
        if p.parent.name in merged:
            continue
        rel = p.relative_to(root).as_posix()
        rec = _read_json(p, rel)
        for f in ("collection_id", "prompt_index", "score"):
            if not isinstance(rec, dict) or f not in rec:
                raise DataError(f"dataset DreamBench++ {rel}: missing field {f!r}")
        rows.append({"method": p.parent.name, "rater": "gpt", "group": setting, "subject": str(rec["collection_id"]),
                     "prompt_index": int(rec["prompt_index"]),
                     "score": _score(rec["score"], f"dataset DreamBench++ {rel}, field 'score'"), "_file": rel})
    return rows


def _method_dir(root: Path, method: str) -> Path:
    samples = root / "samples"
    d = samples / DBPP_METHOD_DIRS.get(method, method)
    if d.is_dir():
        return d
    cand = sorted(p for p in samples.glob(f"{method}_*") if p.is_dir()) if samples.is_dir() else []
    if len(cand) == 1:
        return cand[0]
    raise DataError(f"dataset DreamBench++: no samples folder for method {method!r} (looked for {d}"
                    + (f"; candidates {[c.name for c in cand]}" if cand else "") + ")")


def load_dreambenchpp(root: str | os.PathLike, check_files: bool = True, gpt: bool = True) -> DreamBenchPP:
    """Read DreamBench++ from its publishers' layout (the release's repository root, where its own
    scripts run; docs/paper-profile.md)::

        root/data/images/<category>/<NN>.jpg            reference images (animal, human, object, style)
        root/data/captions/<category>/<NN>.txt          line 1: subject name; then its 9 prompts
        root/samples/<method folder>/tgt_image/<collection_id>/<prompt_index>_0.jpg
        root/data_human_rating/raw_data/<group>/*-<method>.json     {"<collection_id>-<k>": [cp, pf]}
        root/data_gpt_rating/concept_preservation_full/...          optional GPT-4o ratings

    Only concept preservation (``cp``) is read. Every rating must name a known subject and (with
    ``check_files``) a generated image that exists. Bad input raises
    :class:`~nearid_lib.data.schema.DataError` naming the file, key or row and field."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"dataset DreamBench++: folder {root} does not exist")
    subj = _dbpp_subjects(root)
    ref = dict(zip(subj.subject, subj.image))
    rows = _human_rows(root) + (_gpt_rows(root) if gpt else [])
    if not any(r["rater"] == "human" for r in rows):
        raise DataError(f"dataset DreamBench++: no human ratings in {root / 'data_human_rating'} "
                        f"(raw_data/<group>/*-<method>.json)")
    dirs: dict[str, Path] = {}
    for r in rows:
        if r["subject"] not in ref:
            raise DataError(f"dataset DreamBench++ {r['_file']}, key '{r['subject']}-{r['prompt_index']}', "
                            f"field 'collection_id': unknown subject (not in data/captions)")
        if r["method"] not in dirs:
            dirs[r["method"]] = _method_dir(root, r["method"])
        img = dirs[r["method"]] / "tgt_image" / r["subject"] / f"{r['prompt_index']}_0.jpg"
        if check_files and not img.exists():
            raise DataError(f"dataset DreamBench++ {r['_file']}, key '{r['subject']}-{r['prompt_index']}', "
                            f"field 'image': generated image {img} not found")
        r["reference"], r["image"] = ref[r["subject"]], str(img.resolve() if img.exists() else img)
    ratings = pd.DataFrame(rows, columns=_RATING_COLS + ["_file"]).drop(columns="_file")
    ratings = ratings.sort_values(["rater", "group", "method", "subject", "prompt_index"], kind="stable")
    return DreamBenchPP(subjects=subj, ratings=ratings.reset_index(drop=True))


DBPP_DIRNAME = "dreambenchpp"
DOWNLOAD_STEPS = ("unzip data.zip of the hub dataset yuangpeng/dreambench_plus (data/images, data/captions), "
                  "and the 'Full Samples with 7 methods' (samples/), 'human rating data' "
                  "(data_human_rating/) and optionally 'GPT rating data' (data_gpt_rating/) zips linked "
                  "from github.com/yuangpeng/dreambench_plus, all into one folder "
                  "$NEARID_DOWNLOADS/dreambenchpp")


def human_rating_rows(dbpp: DreamBenchPP, max_rows: int | None = None) -> pd.DataFrame:
    """The human rating rows of ``dbpp`` (first ``max_rows``), each with its subject's reference
    image (where the ratings do not name one) and category; ``group`` = "all" when absent."""
    hum = dbpp.ratings[dbpp.ratings["rater"] == "human"].reset_index(drop=True)
    if "group" not in hum.columns:
        hum = hum.assign(group="all")
    if max_rows is not None:
        hum = hum.iloc[:max_rows]
    if "reference" not in hum.columns:
        ref = dbpp.subjects.drop_duplicates("subject").set_index("subject")["image"]
        hum = hum.assign(reference=ref.reindex(hum["subject"]).to_numpy())
    cat = dbpp.subjects.drop_duplicates("subject").set_index("subject")["category"]
    return hum.assign(category=cat.reindex(hum["subject"]).fillna("").to_numpy())


def dbpp_mean_ratings(dbpp: DreamBenchPP, max_rows: int | None = None) -> pd.DataFrame:
    """One row per rated generated image (method, subject, prompt_index, reference, image, category)
    with ``rating`` = the mean human concept-preservation score over the rater groups that rated it
    (rows no group rated dropped) and ``n_raters``: ID-Sim's DreamBench++ pairs (Spearman/Kendall of
    a similarity with ``rating``). The authors' further filter (6,921 "valid pairs", 110 subjects)
    is not published; ``n`` and subjects are reported beside the value instead."""
    hum = human_rating_rows(dbpp, None)
    keys = ["method", "subject", "prompt_index", "reference", "image", "category"]
    g = hum.dropna(subset=["score"]).groupby(keys, sort=True)["score"]
    out = g.agg(rating="mean", n_raters="count").reset_index()
    return out.iloc[:max_rows].reset_index(drop=True) if max_rows is not None else out


# ----------------------------------------------------------------------------- Subjects2k
SUBJECTS2K_COLUMNS = ("reference_image", "test_image", "pair_id", "human_votes", "human_agreement",
                      "binary_label", "num_human_votes", "gpt_score")


def load_subjects2k(repo_id: str = "chaenayo/Subjects2k", max_pairs: int | None = None):
    """The Subjects2k benchmark (hub dataset ``repo_id`` through :func:`nearid_lib.hub.load_hub_dataset`,
    i.e. the mirror when ``NEARID_HUB_DIR`` is set) as one ``datasets.Dataset``: the ``test`` split
    if there is one, else the only split. Checks the released columns (:data:`SUBJECTS2K_COLUMNS`)
    and that ``binary_label`` is 0/1 and ``human_agreement`` in [0, 1], naming the row's ``pair_id``."""
    dd = hub.load_hub_dataset(repo_id)
    splits = list(dd)
    split = "test" if "test" in splits else (splits[0] if len(splits) == 1 else None)
    if split is None:
        raise DataError(f"dataset {repo_id}: several splits {splits} and none named 'test'")
    ds = dd[split]
    miss = [c for c in SUBJECTS2K_COLUMNS if c not in ds.column_names]
    if miss:
        raise DataError(f"dataset {repo_id} split {split!r}: missing field(s) {miss}; has {ds.column_names}")
    if max_pairs is not None:
        ds = ds.select(range(min(int(max_pairs), len(ds))))
    lab = ds["binary_label"]
    agr = ds["human_agreement"]
    ids = ds["pair_id"]
    for i, (y, c) in enumerate(zip(lab, agr)):
        if y not in (0, 1):
            raise DataError(f"dataset {repo_id} split {split!r}, row {i} (pair_id {ids[i]!r}), field "
                            f"'binary_label': {y!r} is not 0 or 1")
        if c is None or not 0.0 <= float(c) <= 1.0:
            raise DataError(f"dataset {repo_id} split {split!r}, row {i} (pair_id {ids[i]!r}), field "
                            f"'human_agreement': {c!r} is not in [0, 1]")
    return ds
