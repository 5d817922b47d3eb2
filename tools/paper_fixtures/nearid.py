"""NearID part of the dry-run mirror: the released datasets in their published schemas and tiny
random-init models of the paper's classes saved under the paper's repo ids.

Datasets are written as ``hf download --local-dir`` leaves them, each in the layout its publisher
chose: the positives and MTG as ``push_to_hub`` parquet (``README.md``, the dataset card with its
``dataset_info`` features, and ``data/<split>-00000-of-00001.parquet``), the nine distractor repos
as ``save_to_disk`` folders (``README.md`` beside ``dataset_dict.json`` and
``train/data-0000k-of-0000n.arrow``, ``train/state.json``, ``train/dataset_info.json``, several
shards), plus the download metadata (``.cache/huggingface/download/*.metadata``) whose first line
is the commit read, here ``dryrun-fixture``. The schemas are
:func:`~nearid_lib.data.released.positive_features` of the card the authors publish today (its
column list in :data:`~nearid_lib.data.released_schema.TODAY`, read from
``scripts/upload_nearid_datasets.py`` of Gorluxor/NearID at commit 1a2cc71: ``images1..3``, their
foreground masks ``masks1..3``, ``dino_*``, ``aesthetics*``, ``size*``, ``filenames*``, ``id_safe``,
``split``), or of the earlier card (``layout=EARLIER``: ``img1..3``, no masks, ``split`` optional),
:func:`~nearid_lib.data.released.distractor_features` and the MTG image columns; nothing else. :func:`write_authors_release` writes the authors' GitHub release layout
(``splits/*.json`` row positions, ``dreambench_plus/ratings``, ``evaluation/vl_template_v2.txt``).

Images are tiny procedural scenes: an identity is a shape, a colour and a stripe count; its views
put it at other places and scales on other backgrounds (each with its released mask: the shape, plus
three stray specks that the authors' mask clean-up removes); a distractor of a source repaints
another instance (another colour and stripe count) into the very same background and place, at the
source's resolution.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from tools.tiny_models.clipseg import save_tiny_clipseg
from nearid_lib.data.released import RELEASED_SOURCES, distractor_features, mtg_features, positive_features
from nearid_lib.data.released_schema import TODAY, PositivesLayout
from nearid_lib.judge import build_tiny_qwen3vl
from .dbpp import write_ratings

__all__ = ["FIXTURE_REVISION", "write_nearid_datasets", "write_nearid_models", "write_dataset_repo",
           "write_disk_repo", "SOURCE_PX", "fixture_splits", "write_authors_release"]

FIXTURE_REVISION = "dryrun-fixture"
BASE_PX = 64
# the released sources' resolutions, scaled down: *_1024 and Qwen_1328 are larger than the base
SOURCE_PX = {s: (96 if s.endswith("_1024") else 80 if s.endswith("_1328") else BASE_PX) for s in RELEASED_SOURCES}
_SHAPES = ("ellipse", "box", "triangle")
_COLOURS = {"red": (200, 40, 40), "green": (40, 170, 60), "blue": (50, 70, 200), "yellow": (220, 200, 40),
            "purple": (140, 50, 170), "orange": (230, 130, 30)}


def _png(im: Image.Image) -> dict:
    b = io.BytesIO()
    im.save(b, format="PNG")
    return {"bytes": b.getvalue(), "path": None}


def _background(rng: np.random.Generator, px: int) -> Image.Image:
    """A smooth two-colour gradient with noise: every view gets its own."""
    a, b = rng.integers(0, 255, 3), rng.integers(0, 255, 3)
    t = np.linspace(0, 1, px)[None, :, None] * np.ones((px, 1, 1))
    arr = a * (1 - t) + b * t + rng.normal(0, 12, (px, px, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def _draw(im: Image.Image, box: tuple[float, float, float, float], shape: str, colour, stripes: int) -> None:
    d = ImageDraw.Draw(im)
    x0, y0, x1, y1 = box
    if shape == "ellipse":
        d.ellipse(box, fill=colour)
    elif shape == "box":
        d.rectangle(box, fill=colour)
    else:
        d.polygon([(x0, y1), ((x0 + x1) / 2, y0), (x1, y1)], fill=colour)
    for j in range(stripes):                       # the identity's marking: dark vertical stripes
        x = x0 + (j + 1) * (x1 - x0) / (stripes + 1)
        d.line([(x, y0 + (y1 - y0) * 0.3), (x, y1 - (y1 - y0) * 0.2)], fill=(20, 20, 20), width=2)


def _identities(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, 1])
    out = []
    for i in range(n):
        shape = _SHAPES[i % len(_SHAPES)]
        colour = list(_COLOURS)[(i // len(_SHAPES)) % len(_COLOURS)]
        stripes = int(rng.integers(1, 4))
        n_images = 3 if i % 3 == 0 else 2            # NearID: a third of the identities have 3 views
        # two identities share one Objaverse asset: the split rule must keep them together
        obj = f"{(i if i != 5 else 4):032x}"
        out.append({"id": 1000 + 7 * i, "shape": shape, "colour": colour, "stripes": stripes,
                    "n_images": n_images, "objaverse_id": obj})
    return out


def _view_box(rng: np.random.Generator, px: int) -> tuple[float, float, float, float]:
    s = px * rng.uniform(0.45, 0.6)
    x, y = rng.uniform(0.05 * px, px - s - 0.05 * px), rng.uniform(0.05 * px, px - s - 0.05 * px)
    return (x, y, x + s, y + s)


def _scale(box, f):
    return tuple(v * f for v in box)


def _mask(box, shape: str, rng: np.random.Generator) -> Image.Image:
    """A view's released foreground mask: the object at 255 and three isolated specks at 200 at
    least 6 pixels away from it (what the authors' clean-up removes and a plain ``> 0`` keeps)."""
    from scipy import ndimage

    m = Image.new("L", (BASE_PX, BASE_PX), 0)
    _draw(m, box, shape, 255, 0)
    arr = np.asarray(m).copy()
    free = np.argwhere(~ndimage.binary_dilation(arr > 0, iterations=6))
    for y, x in free[rng.choice(len(free), size=3, replace=False)]:
        arr[y, x] = 200
    return Image.fromarray(arr, "L")


def _rows(n: int, seed: int, layout: PositivesLayout = TODAY) -> tuple[dict, dict[str, dict]]:
    """Columns of the positives repo (in ``layout``: every column of its card) and of each
    distractor repo (same ids, same metadata)."""
    ids = _identities(n, seed)
    pos = {c: [] for c in positive_features(layout)}
    dist = {s: {c: [] for c in distractor_features()} for s in RELEASED_SOURCES}
    img, msk = layout.image_prefix, layout.mask_prefix
    splits = fixture_splits(n)
    for i, ident in enumerate(ids):
        desc = f"a {ident['colour']} {ident['shape']} with {ident['stripes']} dark stripes"
        meta = {"id": ident["id"], "category": "rigid", "category_description": desc,
                "n_images": ident["n_images"], "objaverse_id": ident["objaverse_id"], "quality": "good"}
        for c, v in meta.items():
            pos[c].append(v)
            for s in RELEASED_SOURCES:
                dist[s][c].append(v)
        more = {"dino_01": 0.5 + 0.01 * i, "dino_02": 0.4 if ident["n_images"] == 3 else None,
                "dino_12": 0.45 if ident["n_images"] == 3 else None, "id_safe": i % 4 != 1, "split": splits[i]}
        for c, v in more.items():
            if c in pos:
                pos[c].append(v)
        for k in (1, 2, 3):
            there = k <= ident["n_images"]
            pos[f"prompts{k}"].append(f"{desc}, view {k}" if there else "")
            for c, v in ((f"aesthetics{k}", 5.0 + 0.1 * k if there else None),
                         (f"size{k}", [BASE_PX, BASE_PX] if there else None),
                         (f"filenames{k}", f"syncd/{ident['id']}/view{k}.png" if there else "")):
                if c in pos:
                    pos[c].append(v)
            for si, s in enumerate(RELEASED_SOURCES):
                dist[s][f"prompts{k}"].append(f"a similar but different object, {s}" if there else "")
            if not there:
                pos[f"{img}{k}"].append(None)
                if msk:
                    pos[f"{msk}{k}"].append(None)
                for s in RELEASED_SOURCES:
                    dist[s][f"nimg{k}"].append(None)
                continue
            rng = np.random.default_rng([seed, 2, i, k])
            bg = _background(rng, BASE_PX)
            box = _view_box(rng, BASE_PX)
            im = bg.copy()
            _draw(im, box, ident["shape"], _COLOURS[ident["colour"]], ident["stripes"])
            pos[f"{img}{k}"].append(_png(im))
            if msk:
                pos[f"{msk}{k}"].append(_png(_mask(box, ident["shape"], rng)))
            for si, s in enumerate(RELEASED_SOURCES):
                px = SOURCE_PX[s]
                other = list(_COLOURS)[(list(_COLOURS).index(ident["colour"]) + 1 + si % 3) % len(_COLOURS)]
                d = bg.resize((px, px), Image.BILINEAR)
                _draw(d, _scale(box, px / BASE_PX), ident["shape"], _COLOURS[other], (ident["stripes"] + si) % 3 + 1)
                dist[s][f"nimg{k}"].append(_png(d))
    return pos, dist


def _card(pretty: str, features, splits: list[str], body: str) -> str:
    """A dataset card whose YAML ``dataset_info`` lists ``features`` (the hub's card layout)."""
    import datasets

    lines = ["---", "dataset_info:", "  features:"]
    for name, f in features.items():
        if isinstance(f, (datasets.Sequence, datasets.List)):
            lines += [f"    - name: {name}", f"      sequence: {f.feature.dtype}"]
            continue
        dtype = "image" if isinstance(f, datasets.Image) else f.dtype
        lines += [f"    - name: {name}", f"      dtype: {dtype}"]
    lines += ["  splits:"] + [f"    - name: {s}" for s in splits]
    lines += ["license: cc-by-4.0", f'pretty_name: "{pretty}"', "---", "", f"# {pretty}", "", body, ""]
    return "\n".join(lines)


def write_disk_repo(repo_dir: Path, cols: dict, features, card: str, num_shards: int = 2) -> Path:
    """One dataset repo in the ``save_to_disk`` layout of the NearID distractor repos (what
    ``hf download --local-dir`` leaves): ``README.md`` beside ``DatasetDict({"train": ...})
    .save_to_disk(repo_dir, num_shards=...)`` (``dataset_dict.json``, ``train/data-0000k-of-0000n.arrow``,
    ``train/state.json``, ``train/dataset_info.json``) and the download metadata."""
    import datasets

    repo_dir = Path(repo_dir)
    repo_dir.mkdir(parents=True, exist_ok=True)
    ds = datasets.Dataset.from_dict(cols, features=features)
    datasets.DatasetDict({"train": ds}).save_to_disk(str(repo_dir), num_shards={"train": num_shards})
    meta = repo_dir / ".cache" / "huggingface" / "download" / "train"
    meta.mkdir(parents=True, exist_ok=True)
    for f in sorted((repo_dir / "train").glob("*")):
        (meta / f"{f.name}.metadata").write_text(f"{FIXTURE_REVISION}\n\"etag\"\n0.0\n")
    (repo_dir / "README.md").write_text(card)
    return repo_dir


def fixture_splits(n_ids: int) -> list[str]:
    """The fixture's official partition, by row: ``k = round(n_ids / 9)`` val and ``2k`` test rows
    spread over the table (2 / 4 of 14 or 18), the rest train; not the project's split rule (which
    keeps the two identities that share an asset together), so a run that ignored it would not
    match it."""
    k = max(1, round(n_ids / 9))
    out = ["train"] * n_ids

    def take(start: int, step: int, split: str, count: int) -> None:
        i = start
        while count:
            i %= n_ids
            if out[i] == "train":
                out[i], count = split, count - 1
            i += step

    take(3, 9, "val", k)
    take(1, 5, "test", 2 * k)
    return out


def write_dataset_repo(repo_dir: Path, splits: dict[str, dict], features, card: str) -> Path:
    """One dataset repo in the layout ``huggingface-cli download --local-dir`` leaves:
    ``README.md``, ``data/<split>-00000-of-00001.parquet`` and the download metadata."""
    import datasets

    repo_dir = Path(repo_dir)
    (repo_dir / "data").mkdir(parents=True, exist_ok=True)
    meta = repo_dir / ".cache" / "huggingface" / "download" / "data"
    meta.mkdir(parents=True, exist_ok=True)
    for split, cols in splits.items():
        name = f"{split}-00000-of-00001.parquet"
        datasets.Dataset.from_dict(cols, features=features).to_parquet(str(repo_dir / "data" / name))
        (meta / f"{name}.metadata").write_text(f"{FIXTURE_REVISION}\n\"etag\"\n0.0\n")
    (repo_dir / "README.md").write_text(card)
    return repo_dir


def _mtg_split(n: int, seed: int, split_id: int) -> dict:
    cols = {c: [] for c in mtg_features()}
    for i in range(n):
        rng = np.random.default_rng([seed, 3, split_id, i])
        shape, colour = _SHAPES[i % 3], list(_COLOURS)[i % len(_COLOURS)]
        for k in (1, 2):
            bg = _background(rng, BASE_PX)
            box = _view_box(rng, BASE_PX)
            orig = bg.copy()
            _draw(orig, box, shape, _COLOURS[colour], 2)
            obj = Image.new("L", orig.size, 0)
            _draw(obj, box, shape, 255, 0)
            # the part edit: the top band of the object, of a size that differs per pair
            x0, y0, x1, y1 = box
            frac = 0.15 + 0.5 * rng.random()
            part = Image.new("L", orig.size, 0)
            ImageDraw.Draw(part).rectangle((x0, y0, x1, y0 + (y1 - y0) * frac), fill=255)
            part = Image.fromarray((np.asarray(part) & np.asarray(obj)).astype(np.uint8))
            inp = orig.copy()
            inp.paste(Image.new("RGB", orig.size, (235, 235, 235)), mask=part)
            for f, im in (("original", orig), ("inpainted", inp), ("object_mask", obj), ("part_mask", part)):
                cols[f"image_{k}_{f}"].append(_png(im))
    return cols


def write_nearid_datasets(hub_dir: Path, n_ids: int = 18, n_mtg: tuple[int, int] = (6, 6), seed: int = 0,
                          split_column: bool = True, layout: PositivesLayout = TODAY) -> list[str]:
    """``Aleksandar/NearID`` (parquet) in the published ``layout``: by default today's card
    (:data:`~nearid_lib.data.released_schema.TODAY`, its columns as read from the authors'
    repository at the commit it names: ``images1..3``, ``masks1..3``, the metadata columns and the
    official ``split`` of :func:`fixture_splits`), or the earlier card
    (:data:`~nearid_lib.data.released_schema.EARLIER`: ``img1..3``, no masks; with the ``split``
    column unless ``split_column=False``); the nine ``Aleksandar/NearID-<source>`` repos
    (``save_to_disk`` folders, 2 shards) and ``abdo-eldesokey/mtg-dataset`` into the mirror
    ``hub_dir``; returns the repo ids written."""
    import datasets

    hub_dir = Path(hub_dir)
    pos, dist = _rows(n_ids, seed, layout)
    feats = positive_features(layout)
    if split_column and "split" not in feats:
        pos["split"] = fixture_splits(n_ids)
        feats = datasets.Features({**feats, "split": datasets.Value("string")})
    elif not split_column and "split" in feats:
        pos.pop("split")
        feats = datasets.Features({c: f for c, f in feats.items() if c != "split"})
    body = (f"Dry-run fixture in the published schema of the NearID datasets (tiny procedural images); "
            f"the positives' columns are the card of Gorluxor/NearID at {layout.commit[:7]} ({layout.name}).")
    write_dataset_repo(hub_dir / "Aleksandar" / "NearID", {"train": pos}, feats,
                       _card("NearID (Multi-View Identity Dataset)", feats, ["train"], body))
    out = ["Aleksandar/NearID"]
    for s in RELEASED_SOURCES:
        write_disk_repo(hub_dir / "Aleksandar" / f"NearID-{s}", dist[s], distractor_features(),
                        _card(f"NearID-{s} (Near-Identity Distractors)", distractor_features(), ["train"], body))
        out.append(f"Aleksandar/NearID-{s}")
    mtg = {"train": _mtg_split(n_mtg[0], seed, 0), "test": _mtg_split(n_mtg[1], seed, 1)}
    write_dataset_repo(hub_dir / "abdo-eldesokey" / "mtg-dataset", mtg, mtg_features(),
                       _card("MTG", mtg_features(), list(mtg), "Dry-run fixture with the MTG image columns."))
    out.append("abdo-eldesokey/mtg-dataset")
    return out


def write_authors_release(downloads_dir: Path, n_ids: int = 18, seed: int = 0) -> Path:
    """The files of the authors' GitHub release (``Gorluxor/NearID``) that the paper path reads, in
    its layout, at ``downloads_dir/NearID``: ``splits/{train,val,test}.json`` (sorted 0-based row
    positions of :func:`fixture_splits`), ``dreambench_plus/ratings`` (per-image scores of every
    scorer and both human groups, :func:`tools.paper_fixtures.dbpp.write_ratings`) and
    ``evaluation/vl_template_v2.txt`` (a judge prompt asking for a 0-10 JSON score)."""
    root = Path(downloads_dir) / "NearID"
    (root / "splits").mkdir(parents=True, exist_ok=True)
    parts = fixture_splits(n_ids)
    for split in ("train", "val", "test"):
        (root / "splits" / f"{split}.json").write_text(json.dumps([i for i, s in enumerate(parts) if s == split]))
    write_ratings(root / "dreambench_plus" / "ratings", seed=seed)
    (root / "evaluation").mkdir(parents=True, exist_ok=True)
    (root / "evaluation" / "vl_template_v2.txt").write_text(
        "You see two images, A and B. Decide whether they show the same physical object instance "
        "(not merely the same category). Answer with JSON only: {\"match_cues\": [...], "
        "\"conflict_cues\": [...], \"background_used\": false, \"confidence\": 0.0, \"score\": 0}, "
        "where score is an integer from 0 (different instance) to 10 (certainly the same instance).\n")
    return root


# --------------------------------------------------------------------------- models
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               image_size=32, patch_size=8)
_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=128, max_position_embeddings=16)


def _seeded(seed: int):
    import torch

    torch.manual_seed(seed)


def _save_siglip2(path: Path):
    """A tiny full ``SiglipModel`` (text + vision), as ``google/siglip2-so400m-patch14-384`` is."""
    from transformers import SiglipConfig, SiglipModel

    _seeded(1)
    model = SiglipModel(SiglipConfig(text_config=_TEXT, vision_config=_VISION))
    model.save_pretrained(path)
    return model


def _save_release(path: Path, siglip) -> None:
    """The released NearID checkpoint's layout (``Aleksandar/nearid-siglip2``): a ``nearid`` config
    with its ``vision_config`` and ``model.safetensors`` holding ``backbone.vision_model.*`` (the
    frozen tower and the trained MAP head), here with a head perturbed away from SigLIP's own."""
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    tower = {f"backbone.vision_model.{k}": v.detach().clone().contiguous()
             for k, v in siglip.vision_model.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    for k, v in tower.items():
        if ".head." in k and v.is_floating_point():
            tower[k] = (v + 0.05 * torch.randn(v.shape, generator=g)).contiguous()
    save_file(tower, str(path / "model.safetensors"), metadata={"format": "pt"})
    cfg = {"model_type": "nearid", "architectures": ["NearIDModel"], "embed_dim": _VISION["hidden_size"],
           "normalize_embeddings": True, "vision_config": {**_VISION, "hidden_act": "gelu_pytorch_tanh",
                                                           "layer_norm_eps": 1e-6, "num_channels": 3}}
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


def write_nearid_models(hub_dir: Path) -> list[str]:
    """Tiny random-init models of the NearID tables' classes under the paper's repo ids; returns them."""
    from transformers import CLIPConfig, CLIPModel, Dinov2Config, Dinov2Model

    hub_dir = Path(hub_dir)
    siglip = _save_siglip2(hub_dir / "google" / "siglip2-so400m-patch14-384")
    _save_release(hub_dir / "Aleksandar" / "nearid-siglip2", siglip)
    _seeded(3)
    CLIPModel(CLIPConfig(text_config=_TEXT, vision_config={**_VISION, "projection_dim": 16},
                         projection_dim=16)).save_pretrained(hub_dir / "openai" / "clip-vit-large-patch14")
    _seeded(4)
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                             image_size=32, patch_size=8)).save_pretrained(hub_dir / "facebook" / "dinov2-large")
    save_tiny_clipseg(hub_dir / "CIDAS" / "clipseg-rd64-refined")
    judge, proc = build_tiny_qwen3vl(seed=5)
    jdir = hub_dir / "Qwen" / "Qwen3-VL-30B-A3B-Instruct"
    judge.save_pretrained(jdir)
    proc.save_pretrained(jdir)
    return ["google/siglip2-so400m-patch14-384", "Aleksandar/nearid-siglip2", "openai/clip-vit-large-patch14",
            "facebook/dinov2-large", "CIDAS/clipseg-rd64-refined", "Qwen/Qwen3-VL-30B-A3B-Instruct"]
