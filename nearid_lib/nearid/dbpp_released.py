"""DreamBench++ metric-to-human alignment from per-image scores in the layout of the NearID authors'
release (``dreambench_plus/ratings`` of ``Gorluxor/NearID``): NearID Table 2, Table 1's DB++ column
and Figure 4 for every scorer the folder holds, in seconds on a CPU, in every profile.

The layout (``REPRODUCTION.md`` and ``dreambench_plus/README.md`` of the release)::

    ratings/data_<scorer>_rating/<method>.json                       # nearid, backbone, dino, ...
    ratings/data_gpt_rating/concept_preservation_full/<method>.json  # GPT-4o
    ratings/data_human_rating/merged_data/group{1,2}/<method>-cp.json

Each file is one JSON object ``{image key: score}`` over the same 1,350 generated images in the same
order (animal, human, object, style). Keys read ``<category>_<NN>_<subject>-<prompt>``; most metric
files add an image index ``_<k>`` (dropped before comparing), and the metric files call object 20
``rubik's_cube`` where the human files say ``magic_cube`` (:data:`KEY_ALIASES`). Files are aligned by
position; a file whose normalised keys differ from the first human group's is an error naming the
file and the first differing key.

The statistic is the guide's (and NearID Table 2's): per category and method, the Pearson r of the
metric with each human group separately, ``r`` their mean and ``r_spread`` half their difference;
per category the Fisher-z mean over methods (``method = "fisher_z"``, ``r_spread`` = the standard
error of the per-method r, the paper's ±); ``category = "all4"`` the Fisher-z mean of the four
category values (the guide's ``--full`` aggregate). Human-human is the Pearson r of the two groups.
The four categories are never pooled into one r. Table 1's DB++ column is the ``object`` category.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .. import metrics
from ..data.schema import DataError
from ..paths import downloads_dir

__all__ = ["RATINGS_SUBDIR", "CATEGORIES", "KEY_ALIASES", "METHOD_LABELS", "SCORER_COLUMNS", "SCORER_ROWS",
           "Ratings", "normalise_key", "category_of", "read_score_file", "read_ratings", "ratings_dir",
           "mh_long", "table2_released", "table1_released", "fig4_released", "HUMAN", "CLIP", "RATINGS_WHY",
           "RELEASED_TABLES", "released_tables", "incomplete_all4"]

RATINGS_SUBDIR = Path("NearID") / "dreambench_plus" / "ratings"     # under $NEARID_DOWNLOADS
CATEGORIES = ("live_subject_animal", "live_subject_human", "object", "style")
KEY_ALIASES = {"rubik's_cube": "magic_cube"}
HUMAN = "human_human"
CLIP = 0.9999            # the release's Fisher-z clip (|r| = 1 stays finite)
# method folder name -> NearID Table 2's printed row
METHOD_LABELS = {"textual_inversion_sd": "Textual Inversion", "dreambooth_sd": "DreamBooth",
                 "dreambooth_lora_sdxl": "DreamBooth LoRA", "blip_diffusion": "BLIP-Diffusion", "emu2": "Emu2",
                 "ip_adapter_plus_vit_h_sdxl": "IP-Adapter-Plus ViT-H", "ip_adapter_vit_g_sdxl": "IP-Adapter ViT-G",
                 "fisher_z": "Fisher-z (r̄)"}
# scorer -> NearID Table 2 column prefix (``<prefix>_h``); others keep their own name
SCORER_COLUMNS = {HUMAN: "h", "gpt": "gpt", "dino": "dino", "clipi": "clip", "backbone": "siglip2",
                  "nearid": "nearid", "backbone_maphead": "siglip2_maphead"}
# scorer -> NearID Table 1 row (the DB++ column; the guide's readouts of SigLIP2 are two rows)
SCORER_ROWS = {"clipi": "CLIP", "dino": "DINOv2", "vsm": "VSM*", "backbone": "SigLIP2 (mean-pooled)",
               "backbone_maphead": "SigLIP2", "nearid": "NearID (Ours)", "qwen3vl_30b": "Qwen3VL30B",
               "gpt": "GPT-4o", HUMAN: "Human-Human"}

_SUFFIX = re.compile(r"^(?P<key>.*-\d+)_\d+$")


def normalise_key(key: str) -> str:
    """An image key as the human files write it: the trailing image index ``_<k>`` after the prompt
    index dropped, and the metric files' subject names aliased (:data:`KEY_ALIASES`)."""
    m = _SUFFIX.match(key)
    k = m.group("key") if m else key
    for a, b in KEY_ALIASES.items():
        k = k.replace(a, b)
    return k


def category_of(key: str) -> str:
    """The DreamBench++ category a key belongs to (its prefix), or a DataError."""
    for c in CATEGORIES:
        if key.startswith(c + "_"):
            return c
    raise DataError(f"DreamBench++ key {key!r}: no category prefix ({', '.join(CATEGORIES)})")


def read_score_file(path: str | os.PathLike) -> tuple[list[str], np.ndarray]:
    """``(normalised keys, scores)`` of one rating file (a JSON object key -> number), in file order."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"DreamBench++ ratings {p}: cannot read JSON ({err})") from None
    if not isinstance(obj, dict) or not obj:
        raise DataError(f"DreamBench++ ratings {p}: expected a non-empty object {{image key: score}}")
    keys, vals = [], []
    for k, v in obj.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise DataError(f"DreamBench++ ratings {p}, key {k!r}: {v!r} is not a finite number")
        keys.append(normalise_key(str(k)))
        vals.append(float(v))
    return keys, np.asarray(vals, dtype=np.float64)


@dataclass
class Ratings:
    """Per-image scores aligned by position: ``keys`` (normalised, the first human group's order),
    ``category`` per image, ``human[group][method]`` and ``scores[scorer][method]`` arrays."""

    root: Path
    keys: dict[str, list[str]]                       # method -> keys
    human: dict[str, dict[str, np.ndarray]]          # group -> method -> scores
    scores: dict[str, dict[str, np.ndarray]]         # scorer -> method -> scores
    files: dict[str, str]                            # "<scorer>/<method>" -> path

    @property
    def methods(self) -> list[str]:
        return list(self.keys)

    @property
    def scorers(self) -> list[str]:
        return list(self.scores)


def _check_aligned(ref: list[str], keys: list[str], path: Path, ref_path: str) -> None:
    if keys == ref:
        return
    if len(keys) != len(ref):
        raise DataError(f"DreamBench++ ratings {path}: {len(keys)} images, {ref_path} has {len(ref)}")
    i = next(i for i, (a, b) in enumerate(zip(ref, keys)) if a != b)
    raise DataError(f"DreamBench++ ratings {path}: key {i} is {keys[i]!r} but {ref_path} has {ref[i]!r} there "
                    f"(files must align by position once the '_<k>' suffix is dropped)")


def _method_files(folder: Path, suffix: str = ".json") -> dict[str, Path]:
    return {f.name[:-len(suffix)]: f for f in sorted(folder.glob(f"*{suffix}")) if f.is_file()}


def read_ratings(root: str | os.PathLike, extra: Mapping[str, str | os.PathLike] | None = None) -> Ratings:
    """Read a ratings folder in the release's layout (module docstring) and any ``extra`` scorers
    (name -> folder of ``<method>.json`` in the same key layout, e.g. a user's own metric). Every
    file must align with the first human group's file of its method; the methods are those both
    human groups rated."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"DreamBench++ ratings: folder {root} does not exist")
    hroot = root / "data_human_rating" / "merged_data"
    groups = sorted(d.name for d in hroot.glob("group*") if d.is_dir()) if hroot.is_dir() else []
    if len(groups) < 2:
        raise DataError(f"DreamBench++ ratings {root}: need two human groups in {hroot}/group1, group2 "
                        f"(found {groups or 'none'})")
    per_group = {g: _method_files(hroot / g, "-cp.json") for g in groups}
    methods = [m for m in per_group[groups[0]] if all(m in per_group[g] for g in groups[1:])]
    if not methods:
        raise DataError(f"DreamBench++ ratings {hroot}: no method rated by every group ({groups})")
    keys, human, files = {}, {g: {} for g in groups}, {}
    for m in methods:
        ref_path = per_group[groups[0]][m]
        keys[m], human[groups[0]][m] = read_score_file(ref_path)
        for k in keys[m]:
            category_of(k)                       # every key names its category (or a DataError)
        for g in groups[1:]:
            k, v = read_score_file(per_group[g][m])
            _check_aligned(keys[m], k, per_group[g][m], str(ref_path))
            human[g][m] = v
    folders: dict[str, Path] = {}
    for d in sorted(root.glob("data_*_rating")):
        name = d.name[len("data_"):-len("_rating")]
        if name == "human":
            continue
        if name == "gpt" and (d / "concept_preservation_full").is_dir():
            d = d / "concept_preservation_full"
        folders[name] = d
    for name, d in (extra or {}).items():
        if name in folders or name == HUMAN:
            raise DataError(f"DreamBench++ ratings: scorer name {name!r} is taken (released: {sorted(folders)})")
        d = Path(d).expanduser()
        if not d.is_dir():
            raise DataError(f"DreamBench++ ratings: scores folder {d} of {name!r} does not exist")
        folders[name] = d
    scores: dict[str, dict[str, np.ndarray]] = {}
    for name, d in folders.items():
        got = _method_files(d)
        scores[name] = {}
        for m in methods:
            if m not in got:
                continue
            k, v = read_score_file(got[m])
            _check_aligned(keys[m], k, got[m], str(per_group[groups[0]][m]))
            scores[name][m] = v
            files[f"{name}/{m}"] = str(got[m])
        if not scores[name]:
            raise DataError(f"DreamBench++ ratings {d}: no <method>.json for any rated method {methods}")
    return Ratings(root=root, keys=keys, human=human, scores=scores, files=files)


def ratings_dir() -> Path | None:
    """``$NEARID_DOWNLOADS/NearID/dreambench_plus/ratings`` when it exists (the authors' GitHub
    release, ``python -m nearid_lib.hub`` clones it), else None."""
    d = downloads_dir() / RATINGS_SUBDIR
    return d if d.is_dir() else None


def mh_long(r: Ratings, categories: Sequence[str] = CATEGORIES) -> pd.DataFrame:
    """One row per (scorer, category, method): ``scorer, category, method, r, r_spread, n``
    (:func:`nearid_lib.metrics.metric_to_human_groups` per scorer: per-method r against each human
    group, averaged, ± half their difference; ``fisher_z`` rows over methods; ``all4`` rows over
    categories). ``scorer = "human_human"`` is the Pearson r of the two human groups."""
    g1, g2 = list(r.human)[:2]
    frames = []
    for sc in [HUMAN, *r.scorers]:
        methods = r.methods if sc == HUMAN else [m for m in r.methods if m in r.scores[sc]]
        if not methods:
            continue
        cat = np.concatenate([[category_of(k) for k in r.keys[m]] for m in methods])
        meth = np.concatenate([[m] * len(r.keys[m]) for m in methods])
        keep = np.isin(cat, list(categories))
        h1 = np.concatenate([r.human[g1][m] for m in methods])
        h2 = np.concatenate([r.human[g2][m] for m in methods])
        if sc == HUMAN:
            # one "group" of the other: r = Pearson(h1, h2), no spread
            t = metrics.metric_to_human_groups(h1[keep], [h2[keep]], meth[keep], cat[keep], clip=CLIP)
            t.loc[t["method"] != "fisher_z", "r_spread"] = np.nan
        else:
            s = np.concatenate([r.scores[sc][m] for m in methods])
            t = metrics.metric_to_human_groups(s[keep], [h1[keep], h2[keep]], meth[keep], cat[keep], clip=CLIP)
        frames.append(t.assign(scorer=sc))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["scorer", *metrics.MH_COLUMNS])
    return out[["scorer", *metrics.MH_COLUMNS]]


def incomplete_all4(mh: pd.DataFrame) -> dict[str, list[str]]:
    """``{scorer: [its categories]}`` for every scorer whose ``all4`` rows of :func:`mh_long` pool
    fewer than the four categories (a ratings folder or a user's scores that cover only some of
    them): that ``all4`` is not the release's four-category aggregate."""
    rows = mh[(mh["method"] == "fisher_z") & (mh["category"] != "all4")]
    have = rows.groupby("scorer", sort=False)["category"].agg(lambda c: [x for x in CATEGORIES if x in set(c)])
    return {sc: cats for sc, cats in have.items()
            if len(cats) < len(CATEGORIES) and ((mh["scorer"] == sc) & (mh["category"] == "all4")).any()}


def table2_released(mh: pd.DataFrame, profile: str, category: str = "object") -> pd.DataFrame:
    """NearID Table 2 in the paper's columns (``method`` as printed; ``<prefix>_h`` and
    ``<prefix>_h_std`` per scorer, :data:`SCORER_COLUMNS`) from :func:`mh_long` on ``category``."""
    d = mh[mh["category"] == category]
    if d.empty:
        return pd.DataFrame()
    rows = []
    for m in dict.fromkeys(d["method"]):
        row = {"method": METHOD_LABELS.get(m, m), "method_id": m, "category": category, "profile": profile,
               "rating": "released per-image scores (Gorluxor/NearID dreambench_plus/ratings)"}
        for _, x in d[d["method"] == m].iterrows():
            pref = SCORER_COLUMNS.get(x["scorer"], x["scorer"])
            row[f"{pref}_h"] = x["r"]
            row[f"{pref}_h_std"] = x["r_spread"]
            row[f"n_{pref}"] = x["n"]
        rows.append(row)
    out = pd.DataFrame(rows)
    agg = METHOD_LABELS["fisher_z"]
    known = [m for m in METHOD_LABELS.values() if m in set(out["method"]) and m != agg]
    order = known + [m for m in out["method"] if m not in known and m != agg] + [agg]
    return out.set_index("method").loc[[m for m in order if m in set(out["method"])]].reset_index()


def table1_released(mh: pd.DataFrame, profile: str) -> pd.DataFrame:
    """Table 1's DB++ column from the released scores: one row per scorer (Table 1's row names,
    :data:`SCORER_ROWS`) with ``dbpp_mh`` (the ``object`` category, as reported) and
    ``dbpp_mh_all4`` (Fisher-z over the four categories)."""
    f = mh[mh["method"] == "fisher_z"]
    rows = []
    for sc in dict.fromkeys(f["scorer"]):
        g = f[f["scorer"] == sc].set_index("category")
        rows.append({"row": SCORER_ROWS.get(sc, sc), "scorer": sc, "profile": profile,
                     "ours_label": f"released per-image scores of {sc!r} (dreambench_plus/ratings)",
                     "dbpp_mh": float(g["r"].get("object", np.nan)),
                     "dbpp_mh_std": float(g["r_spread"].get("object", np.nan)),
                     "dbpp_mh_all4": float(g["r"].get("all4", np.nan)),
                     "n_object": int(g["n"].get("object", 0))})
    return pd.DataFrame(rows)


_FIG4 = {"live_subject_animal": "Animal", "live_subject_human": "Human", "object": "Object", "style": "Style"}


def fig4_released(mh: pd.DataFrame, profile: str, ours: str = "nearid", frozen: str = "backbone") -> pd.DataFrame:
    """NearID Figure 4 numbers from the released scores: per category (the paper's labels Animal,
    Human, Object, Style), each scorer's Fisher-z M-H (``mh_<scorer>``) and
    ``delta_mh_nearid_minus_siglip2`` (NearID minus the SigLIP2 backbone readout)."""
    f = mh[(mh["method"] == "fisher_z") & mh["category"].isin(list(_FIG4))]
    if f.empty:
        return pd.DataFrame()
    rows = []
    for c in [c for c in _FIG4 if c in set(f["category"])]:
        g = f[f["category"] == c].set_index("scorer")["r"]
        row = {"category": _FIG4[c], "category_id": c, "profile": profile, "rating": "released per-image scores"}
        row.update({f"mh_{s}": float(v) for s, v in g.items()})
        if ours in g and frozen in g:
            row["delta_mh_nearid_minus_siglip2"] = float(g[ours] - g[frozen])
        rows.append(row)
    return pd.DataFrame(rows)


RATINGS_WHY = ("the NearID authors' per-image DreamBench++ scores are not at $NEARID_DOWNLOADS/NearID/dreambench_plus/"
               "ratings: clone their GitHub release there (python -m nearid_lib.hub download $MIRROR --downloads "
               "$NEARID_DOWNLOADS, or git clone https://github.com/Gorluxor/NearID $NEARID_DOWNLOADS/NearID)")
RELEASED_TABLES = ("04_dbpp_released_mh", "04_dbpp_released_table1", "04_dbpp_released_table2",
                   "04_dbpp_released_fig4")


def released_tables(profile: str, root: str | os.PathLike | None = None) -> dict[str, pd.DataFrame] | None:
    """Every table computed from the released per-image scores (:data:`RELEASED_TABLES`): the long
    M-H rows, Table 1's DB++ column per scorer, Table 2 (object category) and Figure 4's numbers;
    None when the ratings folder (``root``, default :func:`ratings_dir`) is absent."""
    root = Path(root) if root is not None else ratings_dir()
    if root is None or not Path(root).is_dir():
        return None
    mh = mh_long(read_ratings(root))
    return dict(zip(RELEASED_TABLES, (mh.assign(profile=profile), table1_released(mh, profile),
                                      table2_released(mh, profile), fig4_released(mh, profile))))
