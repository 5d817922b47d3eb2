"""The FPR paper's galleries from the published sources (the ``paper`` profile of notebook 11).

Three real datasets and one folder of generated images, read in their publishers' layouts:

- **CUB-200-2011** (hand download): the official tarball ``CUB_200_2011.tgz`` unpacked under
  :func:`~nearid_lib.paths.downloads_dir`, i.e. ``<downloads>/CUB_200_2011/`` holding ``images/``,
  ``classes.txt``, ``images.txt``, ``image_class_labels.txt`` (and ``train_test_split.txt`` ...).
  The authors' script (``data_load_scripts/load_cub_data.py`` of OSU-MLB/Finer-Personalization-Rank)
  takes every image (train and test) of the 15 classes of :data:`~.datasets.CUB_GROUP_IDS`.
- **Stanford Cars** (hub dataset ``Donghyun99/Stanford-Cars``, the authors' source, read through
  :func:`nearid_lib.hub.load_hub_dataset`, so ``NEARID_HUB_DIR`` mirrors it): columns ``image``
  (image) and ``label`` (class label with the model names), splits ``train``/``test``. The authors
  take the *test* split's labels :data:`CARS_LABELS` (``load_cars_data.py``); selection is by those
  label ids and the names come from the dataset's own ``label`` feature.
- **WildlifeReID-10k** (hand download from Kaggle ``wildlifedatasets/wildlifereid-10k``):
  ``<downloads>/WildlifeReID-10k/metadata.csv`` with at least ``identity``, ``path``, ``species``,
  ``dataset`` (the columns the authors' ``load_data_reid.py`` reads) and the images at
  ``<folder>/<path>`` (or ``<folder>/images/<path>``).
- **Generated images** (the user's generators, one folder per method):
  ``<downloads>/fpr_generated/<method>/<dataset>/<identity>/<any>.png`` where ``<dataset>`` is a
  paper key of :data:`DATASET_KEYS` and ``<identity>`` the ``name`` of that dataset's
  ``train_data.csv`` written by :func:`build_paper_galleries` (the references to personalise from).

:func:`build_paper_galleries` writes one FPR folder per dataset (``train_data.csv``,
``gallery_data.csv`` and, where generated images exist, ``generated_data.csv``) under
``data_dir(profile)/fpr/<key>`` and returns, per paper dataset, either the folder or the reason it
was skipped (what to download, and where). Bad input raises :class:`~.layout.FPRLayoutError` naming
the file, the line and the field.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pandas as pd

from ..data.fpr_layout import FPRLayoutError, load_fpr_split, read_generated, write_fpr_table
from ..generate.personalize import METHODS, method_key
from ..hub import HubError, download_command, is_available, load_hub_dataset
from ..paths import data_dir, downloads_dir
from .authors_splits import authors_cars_split, authors_cub_split, authors_reid_split
from .datasets import (
    CUB_GROUP_IDS,
    CUB_GROUPS,
    WILDLIFE_SPECIES,
    FPRSizeError,
    build_cars_split,
    build_cub_split,
    build_wildlife_split,
)

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["CUB_DIRNAME", "WILDLIFE_DIRNAME", "GENERATED_DIRNAME", "CARS_REPO", "CARS_LABELS", "DATASET_KEYS",
           "read_cub_metadata", "read_wildlife_metadata", "read_cars_test", "GalleryBuild",
           "build_paper_galleries", "built_galleries", "collect_generated", "attach_generated", "POOL_CSV"]

CUB_DIRNAME = "CUB_200_2011"
WILDLIFE_DIRNAME = "WildlifeReID-10k"
GENERATED_DIRNAME = "fpr_generated"
CARS_REPO = "Donghyun99/Stanford-Cars"
# the authors' "acura audi bmw" labels of the hub copy's test split (load_cars_data.py)
CARS_LABELS: tuple[int, ...] = (1, 2, 3, 4, 6, 11, 12, 13, 18, 19, 25, 27, 28, 33, 34)
# gallery folder = the paper's dataset key (Tables 5-13; nearid_lib.fpr.tables.PAPER_DATASETS)
DATASET_KEYS: tuple[str, ...] = ("leopard", "cow", "zebra", "tiger", "giraffe", "cub_sparrow", "cub_tern",
                                 "cub_wren", "stanford_cars")
_SOURCE = {"cub": CUB_DIRNAME, "reid": WILDLIFE_DIRNAME, "cars": CARS_REPO}
POOL_CSV = "ablation_gallery_data.csv"     # the authors' Re-ID ablation pool (gallery + extra images)


def _key_source(key: str) -> str:
    return "cub" if key.startswith("cub_") else "cars" if key == "stanford_cars" else "reid"


# ----------------------------------------------------------------------------- CUB-200-2011
def _read_pairs(path: Path, cols: tuple[str, str], int_cols: Sequence[str]) -> pd.DataFrame:
    """One of CUB's space-separated two-column files; an error names the file, line and field."""
    if not path.exists():
        raise FPRLayoutError(f"{path}: missing (CUB-200-2011 tarball layout: {path.parent}/{path.name})")
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.strip().split(" ", 1)
        if len(parts) != 2:
            raise FPRLayoutError(f"{path}: line {i}: expected '<{cols[0]}> <{cols[1]}>', got {line!r}")
        row = dict(zip(cols, parts))
        for c in int_cols:
            try:
                row[c] = int(row[c])
            except ValueError:
                raise FPRLayoutError(f"{path}: line {i}: field '{c}' is not an integer: {row[c]!r}") from None
        rows.append(row)
    if not rows:
        raise FPRLayoutError(f"{path}: empty")
    return pd.DataFrame(rows)


def read_cub_metadata(root: str | os.PathLike, class_ids: Sequence[int] | None = None,
                      check_files: bool = True) -> pd.DataFrame:
    """CUB-200-2011 in its tarball layout as a table ``img_id, class_id, class_name, file_path``
    (absolute), restricted to ``class_ids`` (default: the 15 of :data:`CUB_GROUP_IDS`).

    The ids in ``classes.txt`` must name the classes the authors meant (e.g. 113 =
    ``113.Baird_Sparrow``): a mismatch is an error naming the file and the id."""
    root = Path(root)
    ids = list(class_ids) if class_ids is not None else [i for g in CUB_GROUP_IDS.values() for i in g]
    images = _read_pairs(root / "images.txt", ("img_id", "img_path"), ("img_id",))
    labels = _read_pairs(root / "image_class_labels.txt", ("img_id", "class_id"), ("img_id", "class_id"))
    classes = _read_pairs(root / "classes.txt", ("class_id", "class_name"), ("class_id",))
    if class_ids is None:
        want = {cid: name for g, names in CUB_GROUPS.items() for cid, name in zip(CUB_GROUP_IDS[g], names)}
        have = dict(zip(classes.class_id, classes.class_name.str.replace(r"^\d+\.", "", regex=True)))
        for cid, name in want.items():
            if cid not in have:
                raise FPRLayoutError(f"{root / 'classes.txt'}: class id {cid} ({name}) missing")
            if have[cid].lower() != name.lower():
                raise FPRLayoutError(f"{root / 'classes.txt'}: class id {cid} is {have[cid]!r}, expected "
                                     f"{name!r} (not the official CUB-200-2011 class list?)")
    miss = sorted(set(images.img_id) ^ set(labels.img_id))
    if miss:
        raise FPRLayoutError(f"{root}: images.txt and image_class_labels.txt disagree on image id(s) {miss[:8]}")
    df = images.merge(labels, on="img_id").merge(classes, on="class_id", how="left")
    bad = df.class_name.isna()
    if bad.any():
        raise FPRLayoutError(f"{root / 'image_class_labels.txt'}: class id {int(df.class_id[bad].iloc[0])} "
                             f"(image {int(df.img_id[bad].iloc[0])}) is not in classes.txt")
    df = df[df.class_id.isin(ids)].reset_index(drop=True)
    df["file_path"] = [str(root / "images" / p) for p in df.img_path]
    if check_files:
        for i, p in enumerate(df.file_path):
            if not Path(p).exists():
                raise FPRLayoutError(f"{root / 'images.txt'}: image id {int(df.img_id.iloc[i])}: file "
                                     f"{df.img_path.iloc[i]!r} missing under {root / 'images'}")
    return df[["img_id", "class_id", "class_name", "file_path"]]


# ----------------------------------------------------------------------------- WildlifeReID-10k
def read_wildlife_metadata(root: str | os.PathLike, species: Sequence[str] = WILDLIFE_SPECIES,
                           check_files: bool = True) -> pd.DataFrame:
    """WildlifeReID-10k's ``metadata.csv`` (rows of ``species``; the published columns kept) with
    ``file_path`` = the absolute image path (``<root>/<path>``, or ``<root>/images/<path>``).
    Missing columns, empty cells and missing files are errors naming the file, line and field."""
    root = Path(root)
    csv = root / "metadata.csv"
    if not csv.exists():
        raise FPRLayoutError(f"{csv}: missing (WildlifeReID-10k layout: metadata.csv + images/)")
    df = pd.read_csv(csv, dtype=str, keep_default_na=False, low_memory=False)
    need = ("identity", "path", "species", "dataset")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise FPRLayoutError(f"{csv}: missing column(s) {missing} (found {list(df.columns)})")
    want = {s.lower() for s in species}
    df = df.assign(_line=range(2, len(df) + 2))
    df = df[df.species.str.strip().str.lower().isin(want)].reset_index(drop=True)
    for c in need:
        bad = df[df[c].str.strip() == ""]
        if len(bad):
            raise FPRLayoutError(f"{csv}: line {int(bad._line.iloc[0])}: empty field '{c}'")
    paths = []
    for p, line in zip(df.path, df._line):
        cands = [root / p, root / "images" / p]
        hit = next((c for c in cands if c.exists()), None)
        if hit is None and check_files:
            raise FPRLayoutError(f"{csv}: line {int(line)}: field 'path' names a missing image {p!r} "
                                 f"(looked under {root} and {root / 'images'})")
        paths.append(str(hit or cands[0]))
    df["file_path"] = paths
    return df.drop(columns=["_line"])


# ----------------------------------------------------------------------------- Stanford Cars
def read_cars_test(out_dir: str | os.PathLike, labels: Sequence[int] = CARS_LABELS,
                   repo: str = CARS_REPO) -> pd.DataFrame:
    """The test split of the hub dataset ``repo`` (``image``, ``label``) restricted to ``labels``,
    its images written once as PNG under ``out_dir/images/<label>/<row>.png``; returns ``label,
    class_name, file_path, row`` (``class_name`` from the dataset's ``label`` names)."""
    ds = load_hub_dataset(repo)
    if "test" not in ds:
        raise FPRLayoutError(f"hub dataset {repo}: no 'test' split (found {list(ds)})")
    test = ds["test"]
    for c in ("image", "label"):
        if c not in test.column_names:
            raise FPRLayoutError(f"hub dataset {repo}, split 'test': missing column {c!r} "
                                 f"(found {test.column_names})")
    feat = test.features["label"]
    names = getattr(feat, "names", None)
    all_labels = test["label"]
    want = set(int(x) for x in labels)
    absent = sorted(want - set(int(x) for x in all_labels))
    if absent:
        raise FPRLayoutError(f"hub dataset {repo}, split 'test': label(s) {absent} have no image")
    out = Path(out_dir) / "images"
    rows = []
    for i, lab in enumerate(all_labels):
        lab = int(lab)
        if lab not in want:
            continue
        p = out / str(lab) / f"{i:05d}.png"
        if not p.exists():
            im = test[i]["image"]
            if im is None:
                raise FPRLayoutError(f"hub dataset {repo}, split 'test', row {i}: field 'image' is empty")
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_suffix(".tmp.png")
            im.convert("RGB").save(tmp)
            os.replace(tmp, p)
        rows.append({"label": lab, "class_name": names[lab] if names else str(lab), "file_path": str(p), "row": i})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- generated images
def collect_generated(gen_root: str | os.PathLike, key: str, train: pd.DataFrame,
                      generated_here: str | os.PathLike | None = None) -> pd.DataFrame | None:
    """Every method's generated images of dataset ``key`` as one generated table with a ``source``
    column, or None when no method has images for ``key``.

    The user's folders (``<gen_root>/<method>/<key>/<identity>/<file>``) come first; a method the
    user has no folder for is read from ``generated_here`` (the generation step's output,
    :mod:`nearid_lib.fpr.generation`: finished subjects only, each image with the reference it was
    made from). Method names match in any spelling (``IP-Adapter`` = ``ip_adapter``) and are written
    as the paper's tables spell them (``IP Adapter``). An identity
    folder not in ``train`` is an error naming it."""
    parts, seen = [], set()
    for root, here in ((gen_root, False), (generated_here, True)):
        if root is None or not Path(root).is_dir():
            continue
        for m in sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith("_")):
            mk = method_key(m.name)
            if not (m / key).is_dir() or mk in seen:
                continue
            seen.add(mk)
            name = METHODS[mk].name if mk in METHODS else m.name     # the paper tables' spelling
            if here:
                df = _finished(m / key, name, train)
                if df is None:
                    continue
                parts.append(df.assign(source=f"generated here ({METHODS[mk].pipeline})"))
            else:
                parts.append(read_generated(m / key, method=name, train=train).assign(source=f"user folder ({m.name}/)"))
    return pd.concat(parts, ignore_index=True) if parts else None


def _finished(folder: Path, method: str, train: pd.DataFrame) -> pd.DataFrame | None:
    """The finished subjects (``_done.json``) of one method's generated folder, with each image's
    own reference, prompt and seed."""
    species = train.drop_duplicates("name").set_index("name").species
    rows = []
    for done in sorted(folder.glob("*/_done.json")):
        meta = json.loads(done.read_text())
        name = done.parent.name
        if name not in species.index:
            raise FPRLayoutError(f"{done.parent}: identity {name!r} is not in the reference table")
        rows += [{"name": name, "species": species[name], "file_path": str(done.parent / im["file"]),
                  "ref_path": im["ref_path"], "method": method, "prompt": im["prompt"], "seed": im["seed"]}
                 for im in meta["images"]]
    return pd.DataFrame(rows) if rows else None


@dataclass
class GalleryBuild:
    """What :func:`build_paper_galleries` produced: ``folders`` (paper key -> FPR folder),
    ``skipped`` (paper key -> reason, the dataset's tables are skipped), ``no_generated`` (paper
    key -> reason: gallery built, but no generated images to rank)."""

    root: Path
    folders: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    no_generated: dict[str, str] = field(default_factory=dict)

    def reasons(self) -> dict[str, str]:
        """Paper key -> why its generated-image table (Tables 5-13) is not produced."""
        return {**self.no_generated, **self.skipped}


def _missing(what: str, where: Path, how: str) -> str:
    return f"{what} not found: {how} so that {where} exists (README, 'FPR data')"


def built_galleries(cfg: Profile, world: int = 1) -> dict[str, Path]:
    """The galleries a step reads (paper key -> folder): those ``make fpr-galleries`` built under
    ``data_dir(profile)/fpr``; a lone process with none builds them itself. A launch of several
    processes never builds them (one rank would build while the others wait in a collective): without
    built galleries it stops with the command that builds them."""
    base = data_dir(cfg.name) / "fpr"
    folders = {k: base / k for k in DATASET_KEYS if (base / k / "train_data.csv").exists()}
    if folders:
        return folders
    if world == 1:
        return build_paper_galleries(cfg).folders
    raise FileNotFoundError(f"no FPR galleries under {base}: build them first with `make fpr-galleries "
                            f"PROFILE={cfg.name}` (python -m nearid_lib.steps run fpr-galleries)")


def build_paper_galleries(cfg: Profile, downloads: str | os.PathLike | None = None,
                          out: str | os.PathLike | None = None, seed: int | None = None,
                          generated_here: str | os.PathLike | None = None) -> GalleryBuild:
    """Build the paper's nine galleries (``DATASET_KEYS``) from the published sources into
    ``out`` (default ``data_dir(profile)/fpr``): per key, ``train_data.csv`` + ``gallery_data.csv``
    (``retrieval.gallery_per_id`` gallery and ``retrieval.refs_per_id`` reference images per
    subject; ``retrieval.ids_per_species`` Re-ID subjects per species) and, where
    ``<downloads>/fpr_generated/<method>/<key>/`` exists or ``generated_here`` (the generation
    step's output) holds the method, ``generated_data.csv``. A dataset whose
    download is absent or too small is *skipped with its reason*, never an error; malformed input
    is (:class:`FPRLayoutError` naming file, line and field). ``retrieval.gallery_rule = "authors"``
    draws the FPR authors' galleries instead (:mod:`.authors_splits`) and writes each Re-ID
    species' ablation pool (:data:`POOL_CSV`)."""
    rc = cfg.retrieval
    if rc.gallery_rule not in ("ours", "authors"):
        raise ValueError(f"retrieval.gallery_rule={rc.gallery_rule!r}: expected 'ours' or 'authors'")
    authors = rc.gallery_rule == "authors"
    seed = cfg.seed if seed is None else seed
    dl = Path(downloads) if downloads is not None else downloads_dir()
    root = Path(out) if out is not None else data_dir(cfg.name) / "fpr"
    res = GalleryBuild(root)
    kw = dict(seed=seed, n_gallery=rc.gallery_per_id, n_ref=tuple(rc.refs_per_id))
    splits: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
    pools: dict[str, pd.DataFrame] = {}

    cub = dl / CUB_DIRNAME
    if (cub / "images.txt").exists():
        try:
            meta = read_cub_metadata(cub)
            built = (authors_cub_split(meta, rc.gallery_per_id, rc.refs_per_id[1]) if authors
                     else build_cub_split(meta, **kw))
            for g, tg in built.items():
                splits[f"cub_{g}"] = tg
        except FPRSizeError as err:
            for g in CUB_GROUPS:
                res.skipped[f"cub_{g}"] = f"CUB-200-2011 too small for the gallery: {err}"
    else:
        for g in CUB_GROUPS:
            res.skipped[f"cub_{g}"] = _missing("CUB-200-2011", cub / "images.txt",
                                               f"unpack CUB_200_2011.tgz into {dl}")

    wl = dl / WILDLIFE_DIRNAME
    if (wl / "metadata.csv").exists():
        meta = read_wildlife_metadata(wl)
        for sp in WILDLIFE_SPECIES:
            try:
                if authors:
                    r = authors_reid_split(meta, (sp,), rc.reid_datasets or None, rc.ids_per_species,
                                           tuple(rc.reid_refs), tuple(rc.reid_gallery))
                    splits[sp], pools[sp] = r[sp], r.pool[sp]
                    continue
                splits[sp] = build_wildlife_split(meta, species=(sp,), ids_per_species=rc.ids_per_species,
                                                  datasets=rc.reid_datasets or None, **kw)[sp]
            except FPRSizeError as err:
                res.skipped[sp] = f"WildlifeReID-10k too small for the gallery: {err}"
    else:
        for sp in WILDLIFE_SPECIES:
            res.skipped[sp] = _missing("WildlifeReID-10k", wl / "metadata.csv",
                                       f"unpack the Kaggle archive wildlifedatasets/wildlifereid-10k into {wl}")

    cars_dir = root / "stanford_cars"
    if is_available(CARS_REPO, "dataset"):
        try:
            cars = read_cars_test(cars_dir)
            names = list(dict.fromkeys(cars.sort_values("label").class_name))
            splits["stanford_cars"] = (authors_cars_split(cars, CARS_LABELS, rc.gallery_per_id, rc.refs_per_id[1])
                                       if authors else build_cars_split(cars, models=names, **kw))
        except FPRSizeError as err:
            res.skipped["stanford_cars"] = f"Stanford Cars too small for the gallery: {err}"
        except FPRLayoutError:
            raise                                  # malformed data: the message names split, row, field
        except Exception as err:                   # noqa: BLE001 - offline, gated, network: skip, say why
            hint = "" if isinstance(err, HubError) else (
                f"; on a node without internet mirror it first: `{download_command(CARS_REPO, 'dataset')}`")
            res.skipped["stanford_cars"] = (f"Stanford Cars ({CARS_REPO}) could not be read: "
                                            f"{type(err).__name__}: {str(err)[:300]}{hint}")
    else:
        res.skipped["stanford_cars"] = (f"hub dataset {CARS_REPO} is not in the mirror; fetch it with "
                                        f"`{download_command(CARS_REPO, 'dataset')}`")

    for key in DATASET_KEYS:
        if key not in splits:
            continue
        folder = root / key
        folder.mkdir(parents=True, exist_ok=True)
        train, gallery = splits[key]
        write_fpr_table(train, folder / "train_data.csv", "train")
        write_fpr_table(gallery, folder / "gallery_data.csv", "gallery")
        if key in pools:
            write_fpr_table(pools[key], folder / POOL_CSV, "gallery")
        else:
            (folder / POOL_CSV).unlink(missing_ok=True)
        res.folders[key] = folder
    return attach_generated(res, dl / GENERATED_DIRNAME, generated_here)


def attach_generated(built: GalleryBuild, user_root: str | os.PathLike,
                     generated_here: str | os.PathLike | None = None, note: str = "") -> GalleryBuild:
    """Write (or remove) each built folder's ``generated_data.csv`` from the user's folders and
    the generation step's output (:func:`collect_generated`); ``built.no_generated`` says which
    dataset has no generated images and where to put them (``note``: what the generation step
    could not run, and why)."""
    for key, folder in built.folders.items():
        train = load_fpr_split(folder).train
        gen = collect_generated(user_root, key, train, generated_here)
        table = folder / "generated_data.csv"
        built.no_generated.pop(key, None)
        if gen is None:
            table.unlink(missing_ok=True)
            built.no_generated[key] = (f"no generated images for {key}: put each method's images in "
                                       f"{user_root}/<method>/{key}/<identity>/ (identities = the 'name' "
                                       f"column of {folder / 'train_data.csv'}), or let the generation step "
                                       f"make them (retrieval.generate_methods)" + (f"; {note}" if note else ""))
        else:
            write_fpr_table(gen, table, "generated")
    return built
