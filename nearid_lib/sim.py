"""How similar are these two images (or these pairs)? One call, one command::

    import nearid_lib
    sims = nearid_lib.similarity("a.png", "b.png")               # the profile's default encoder
    sims = nearid_lib.similarity("run1/", "run2/", encoder="efficientnet-lite0")   # same-named files
    sims = nearid_lib.similarity("pairs.csv")                    # a CSV of pairs (columns a, b)

    nearid sim a.png b.png [--encoder NAME] [--out sims.csv]

``a`` and ``b`` are two images (paths, PIL images, arrays), two equally long lists of them, two
folders paired by file name, or ``a`` alone a CSV of pairs (columns ``a, b``, else its first two
columns; relative paths are read from the CSV's folder). The result is a DataFrame with columns
``a``, ``b``, ``similarity`` (cosine of the L2-normalised embeddings, -1..1); ``attrs["encoder"]``
says which model answered and, with two pairs or more, ``attrs["unpaired_mean"]`` is the mean
similarity of the *unpaired* images (a_i against b_j, i != j): the encoder's chance level on these
very images.

The encoder is anything :func:`~nearid_lib.models.resolve_encoder` takes (a registered name,
``module:function``, ``file.py:function``, a hub id, a callable ``list[PIL] -> [N, D]``), loaded the
way the profile loads encoders (``smoke``: tiny random-init models). Its default, ``encoder=None``:

* ``paper``: the released NearID model ``Aleksandar/nearid-siglip2`` (through :mod:`nearid_lib.hub`,
  so a local mirror is read when ``NEARID_HUB_DIR`` is set);
* ``mini`` / ``smoke`` (offline): the profile's trained NearID head when its checkpoint exists
  (``checkpoint_dir(profile)/"nearid"``, written by notebook 03 or ``nearid train``), else the
  profile's frozen backbone (EfficientNet-Lite0 in ``mini``).

A line saying which model answered is always printed (``verbose=False`` silences it; the line is
in ``attrs["encoder"]`` either way). :func:`write_similarities` (``nearid sim --out``) writes the
table with a provenance sidecar ``<name>.meta.json``: the model, the profile, the inputs, the
unpaired level, the commit and the date.
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .runtime.allocator import tune_allocator
from .config import get_profile
from .features import FeatureStore, embed, memory_refs
from .io_utils import table_meta_path, write_csv, write_json
from .models import resolve_device, resolve_encoder
from .models.registry import RELEASE_REPO
from .paths import checkpoint_dir
from .runtime.runmeta import git_state

__all__ = ["similarity", "default_encoder", "read_pairs", "describe", "write_similarities", "SimilarityInputError"]

_IMG_EXT = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")


class SimilarityInputError(ValueError):
    """Inputs that do not make pairs (missing files, unmatched names, lists of different lengths)."""


def _is_pathlike(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def _label(x: Any, i: int) -> str:
    return str(x) if _is_pathlike(x) else f"<{type(x).__name__} {i}>"


def _folder_images(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix.lower() in _IMG_EXT}


def _stem_hint(only_a: list[str], only_b: list[str]) -> str:
    """A hint when unpaired names differ only in their extension (``x.jpg`` vs ``x.png``)."""
    stems_b = {Path(n).stem: n for n in only_b}
    same = [(n, stems_b[Path(n).stem]) for n in only_a if Path(n).stem in stems_b]
    if not same:
        return ""
    x, y = same[0]
    return (f"; {len(same)} of them differ only in the extension (e.g. {x!r} vs {y!r}): the full file name "
            f"pairs images, so rename one side or list the pairs in a CSV (columns a, b)")


def read_pairs(a: Any, b: Any = None) -> tuple[list[Any], list[Any]]:
    """The two aligned lists of images that ``similarity(a, b)`` compares (see the module docstring)."""
    if b is None:
        if not (_is_pathlike(a) and str(a).lower().endswith(".csv")):
            raise SimilarityInputError("similarity: give two images, two lists, two folders, or one CSV of pairs "
                                       f"(got only {_label(a, 0)!r})")
        csv = Path(a)
        if not csv.is_file():
            raise SimilarityInputError(f"similarity: no such CSV {str(csv)!r}")
        df = pd.read_csv(csv, dtype=str, keep_default_na=False)
        cols = ["a", "b"] if {"a", "b"} <= set(df.columns) else list(df.columns[:2])
        if len(cols) < 2:
            raise SimilarityInputError(f"{csv}: a CSV of pairs needs two columns (a, b); it has {list(df.columns)}")
        base = csv.parent

        def where(p: str, row: int, col: str) -> str:
            if not p:
                raise SimilarityInputError(f"{csv}: row {row + 2}, column {col!r} is empty")
            q = Path(p).expanduser()
            return str(q if q.is_absolute() else base / q)

        return ([where(p, i, cols[0]) for i, p in enumerate(df[cols[0]])],
                [where(p, i, cols[1]) for i, p in enumerate(df[cols[1]])])
    dirs = [_is_pathlike(x) and Path(x).is_dir() for x in (a, b)]
    if dirs[0] != dirs[1]:
        folder, other = (a, b) if dirs[0] else (b, a)
        raise SimilarityInputError(
            f"similarity: {str(folder)!r} is a folder but {_label(other, 0)!r} is not; give two folders "
            f"(images paired by file name), two images, or one CSV of pairs")
    if all(dirs):
        fa, fb = _folder_images(Path(a)), _folder_images(Path(b))
        only_a, only_b = sorted(set(fa) - set(fb)), sorted(set(fb) - set(fa))
        if only_a or only_b:
            raise SimilarityInputError(
                f"similarity: folders are paired by file name; {len(only_a)} image(s) only in {a} "
                f"(e.g. {only_a[:3]}), {len(only_b)} only in {b} (e.g. {only_b[:3]})" + _stem_hint(only_a, only_b))
        if not fa:
            raise SimilarityInputError(f"similarity: no images ({', '.join(_IMG_EXT)}) in {a}")
        names = sorted(fa)
        return [str(fa[n]) for n in names], [str(fb[n]) for n in names]
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        a, b = list(a), list(b)
        if len(a) != len(b):
            raise SimilarityInputError(f"similarity: {len(a)} images in a but {len(b)} in b; they are compared "
                                       "pair by pair")
        return a, b
    return [a], [b]


def _cfg(profile: str):
    return get_profile(profile)


def default_encoder(profile: str = "mini") -> tuple[str, dict, str]:
    """``(registered name, load kwargs, description)`` of the model that answers by default."""
    cfg = _cfg(profile)
    if cfg.name == "paper":
        return "nearid", {"checkpoint": RELEASE_REPO}, f"NearID, the released model {RELEASE_REPO}"
    ck = checkpoint_dir(cfg.name) / "nearid"
    if ck.exists():
        return "nearid", {"checkpoint": str(ck)}, f"NearID head trained in profile {cfg.name!r} ({ck})"
    bb = cfg.backbone
    return bb.name, {}, (f"frozen {bb.name} backbone of profile {cfg.name!r}{' (tiny random-init)' if bb.tiny else ''}"
                         f"; no trained NearID head at {ck} (notebook 03_train_nearid or `nearid train` makes one)")


MIN_SIDE = 8   # px: an image smaller than this on a side carries no identity any encoder could read


def _check_size(x: Any) -> None:
    """A degenerate image (a side under :data:`MIN_SIDE` px, e.g. 1x1) is an error naming it: every
    encoder would upsample it to its input size and answer a number that says nothing."""
    try:
        if _is_pathlike(x):
            from PIL import Image

            with Image.open(x) as im:            # the header only
                w, h = im.size
        elif hasattr(x, "size") and isinstance(getattr(x, "size"), tuple):
            w, h = x.size
        elif hasattr(x, "shape") and len(x.shape) >= 2:
            h, w = (x.shape[-2], x.shape[-1]) if len(x.shape) == 3 and x.shape[0] in (1, 3, 4) \
                and x.shape[-1] not in (1, 3, 4) else (x.shape[0], x.shape[1])
        else:
            return
    except OSError:
        return                                   # unreadable: the image loader names the file
    if min(w, h) < MIN_SIDE:
        what = repr(str(x)) if _is_pathlike(x) else f"(an in-memory {type(x).__name__})"
        raise SimilarityInputError(f"similarity: image {what} is {w}x{h} px, below {MIN_SIDE} px on a side: "
                                   f"an encoder would upsample it and its similarity would say nothing")


def similarity(a: Any, b: Any = None, encoder: Any = None, *, profile: str = "mini", name: str | None = None,
               batch_size: int = 32, device: str | None = None, encoder_kw: dict | None = None,
               verbose: bool = True) -> pd.DataFrame:
    """Cosine similarity of each pair (see the module docstring): a DataFrame ``a, b, similarity``.

    Args:
        a, b: two images (path / PIL / array), two equally long lists, two folders of same-named
            files, or ``a`` a CSV of pairs and ``b`` None.
        encoder: a registered name, ``module:function``, ``file.py:function``, a hub id or a
            callable ``list[PIL] -> [N, D]``; None: the profile's default (the module docstring).
        profile: how registered encoders are loaded and which default answers.
        encoder_kw: keyword arguments for loading a registered encoder (e.g. ``{"checkpoint": ...}``).
        verbose: print the one line saying which model answered.
    """
    cfg = _cfg(profile)
    tune_allocator(cfg.runtime.tune_malloc)
    dev = resolve_device(device) if device is not None else None
    left, right = read_pairs(a, b)            # a typo in a path fails before a model is loaded
    for side in (left, right):
        for x in side:
            if _is_pathlike(x) and not Path(x).is_file():
                what = "is a folder, not an image" if Path(x).is_dir() else "does not exist"
                raise SimilarityInputError(f"similarity: no such image file {str(x)!r} (it {what})")
            _check_size(x)
    kw = dict(encoder_kw or {})
    if encoder is None:
        canon, dkw, what = default_encoder(cfg.name)
        kw = {**dkw, **kw}
        encoder = canon
    else:
        what = None
    res = resolve_encoder(encoder, name=name, device=dev, encoder_kw=kw, profile=cfg)
    if what is None:
        what = (f"{res.label} ({'registered, as profile ' + repr(cfg.name) + ' loads it' if res.canon else res.how})"
                + (" (tiny random-init)" if getattr(res.model, "tiny", False) else ""))
    line = f"similarity: answered by {what}"
    if verbose:
        print(line)

    # embed each distinct image once (paths by name; in-memory images by position)
    keys = [x if _is_pathlike(x) else ("obj", id(x)) for x in left + right]
    uniq: dict[Any, Any] = {}
    for k, x in zip(keys, left + right):
        uniq.setdefault(k, x)
    items = list(uniq.values())
    refs = memory_refs(items, [str(i) for i in range(len(items))])    # one row per distinct image
    emb = embed(res.model, refs, "full", FeatureStore(), batch_size=batch_size, progress=verbose,
                desc="similarity").astype(np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    row = {k: i for i, k in enumerate(uniq)}
    ea = emb[[row[k] for k in keys[:len(left)]]]
    eb = emb[[row[k] for k in keys[len(left):]]]
    out = pd.DataFrame({"a": [_label(x, i) for i, x in enumerate(left)],
                        "b": [_label(x, i) for i, x in enumerate(right)],
                        "similarity": (ea * eb).sum(1)})
    out.attrs["encoder"] = line[len("similarity: answered by "):]
    out.attrs["profile"] = cfg.name
    out.attrs["inputs"] = {"a": _input_label(a), "b": None if b is None else _input_label(b)}
    if len(out) >= 2:
        m = ea @ eb.T
        out.attrs["unpaired_mean"] = float((m.sum() - np.trace(m)) / (m.size - len(out)))
    return out


def _input_label(x: Any) -> str:
    if _is_pathlike(x):
        return str(x)
    if isinstance(x, (list, tuple)):
        return f"<{len(x)} images in memory or by path>"
    return f"<an in-memory {type(x).__name__}>"


def write_similarities(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a :func:`similarity` result as CSV with its provenance sidecar ``<name>.meta.json``
    (as every table of the repository has): which model answered, the profile, the inputs, the
    number of pairs, the unpaired (chance) level, the commit and whether the tree was dirty, the
    date. Returns the CSV's path."""
    out = write_csv(df, Path(path))
    git = git_state()
    write_json({"table": out.name, "written_by": "nearid_lib.similarity (nearid sim)",
                "encoder": df.attrs.get("encoder"), "profile": df.attrs.get("profile"),
                "inputs": df.attrs.get("inputs"), "pairs": len(df), "unpaired_mean": df.attrs.get("unpaired_mean"),
                "commit": git.get("sha"), "dirty": git.get("dirty"),
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}, table_meta_path(out))
    return out


def describe(df: pd.DataFrame) -> str:
    """The lines ``nearid sim`` prints under the table: the mean, and the chance level when known."""
    lines = [f"mean similarity {df.similarity.mean():.4f} over {len(df)} pair(s)"]
    if "unpaired_mean" in df.attrs:
        lines.append(f"unpaired images (a_i vs b_j, i != j) score {df.attrs['unpaired_mean']:.4f} on average with "
                     f"this encoder: the chance level of these images")
    return "\n".join(lines)

