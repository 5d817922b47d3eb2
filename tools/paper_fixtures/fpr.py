"""FPR part of the dry-run mirror: the FPR paper's datasets in their publishers' layouts (tiny
images) and tiny random-init models of the FPR encoders' classes under the paper's repo ids.

- :func:`write_fpr_downloads` writes, under the downloads folder, what a user unpacks by hand
  (:mod:`nearid_lib.fpr.downloads`): ``CUB_200_2011/`` in the official tarball layout (the 15 classes
  of the FPR groups plus two others, with their official class ids and names), ``WildlifeReID-10k/``
  (``metadata.csv`` + ``images/``) and ``fpr_generated/<method>/<dataset>/<identity>/*.png`` (the
  user's folders of two methods, :data:`GENERATED_METHODS`, for each of the nine galleries).
- :func:`write_fpr_models` writes, under the hub mirror, the Stanford Cars hub dataset
  ``Donghyun99/Stanford-Cars`` (``image``, ``label`` class label; ``train`` and ``test`` parquet
  shards + card) and tiny models saved under ``openai/clip-vit-base-patch32`` (``CLIPModel``),
  ``facebook/dinov2-base`` (``Dinov2Model``) and ``imageomics/bioclip-2`` (an open_clip ``CLIP`` in
  the repo's ``open_clip_config.json`` + ``open_clip_model.safetensors`` layout). MiewID is not
  written: its class is remote code of its hub repo (the paper profile does not opt into remote
  code by default, so its rows are skipped with that reason).
- :func:`write_carvekit_standin` writes stand-in weights of carvekit's two background-removal
  networks under ``Carve/tracer_b7/tracer_b7.pth`` and ``Carve/fba/fba_matting.pth``: every key
  and shape of the real classes (TRACER-B7, FBA matting), so the background-removal step loads them
  exactly as it loads the release, but each tensor a stride-0 view of a few thousand seeded values
  (a file of a few hundred kB instead of 267 + 139 MB). Its masks are meaningless, its code path the
  real one; the step records that these are not carvekit's weights (their SHA-512 differs).

Sizes fit the dry run's overrides (``retrieval.gallery_per_id=3``, ``refs_per_id=[1,2]``,
``ids_per_species=2``): five or six images per identity, 40 px.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from nearid_lib.fpr.bg_removal import FBA_FILE, FBA_REPO, TRACER_FILE, TRACER_REPO
from nearid_lib.fpr.datasets import CUB_GROUP_IDS, CUB_GROUPS
from nearid_lib.fpr.downloads import CARS_LABELS, CARS_REPO, CUB_DIRNAME, GENERATED_DIRNAME, WILDLIFE_DIRNAME
from nearid_lib.models.specialised import TINY_OPEN_CLIP
from .nearid import _TEXT, _VISION, _png, write_dataset_repo

__all__ = ["write_fpr_downloads", "write_fpr_models", "write_cars_dataset", "write_carvekit_standin",
           "CARS_CLASS_NAMES", "WILDLIFE_SOURCES", "GENERATED_METHODS"]

PX = 40
# the user's own folders: Emu2 (not in diffusers: only ever from a user folder) and IP-Adapter (a
# user folder overrides the generation step's method); the dry run generates the other four
GENERATED_METHODS = ("Emu2", "IP-Adapter")
# WildlifeReID-10k source datasets of each FPR species (``dataset`` column)
WILDLIFE_SOURCES = {"leopard": "LeopardID2022", "cow": "CowDataset", "zebra": "StripeSpotter",
                    "tiger": "ATRW", "giraffe": "Giraffes"}
# Stanford Cars' first 35 classes in the devkit's order (cars_meta.mat; label = class id - 1), which
# cover the authors' labels; the fixture's other 161 labels are placeholders.
_CARS_HEAD = (
    "AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Acura TL Sedan 2012", "Acura TL Type-S 2008",
    "Acura TSX Sedan 2012", "Acura Integra Type R 2001", "Acura ZDX Hatchback 2012",
    "Aston Martin V8 Vantage Convertible 2012", "Aston Martin V8 Vantage Coupe 2012",
    "Aston Martin Virage Convertible 2012", "Aston Martin Virage Coupe 2012", "Audi RS 4 Convertible 2008",
    "Audi A5 Coupe 2012", "Audi TTS Coupe 2012", "Audi R8 Coupe 2012", "Audi V8 Sedan 1994",
    "Audi 100 Sedan 1994", "Audi 100 Wagon 1994", "Audi TT Hatchback 2011", "Audi S6 Sedan 2011",
    "Audi S5 Convertible 2012", "Audi S5 Coupe 2012", "Audi S4 Sedan 2012", "Audi S4 Sedan 2007",
    "Audi TT RS Coupe 2012", "BMW ActiveHybrid 5 Sedan 2012", "BMW 1 Series Convertible 2012",
    "BMW 1 Series Coupe 2012", "BMW 3 Series Sedan 2012", "BMW 3 Series Wagon 2012",
    "BMW 6 Series Convertible 2007", "BMW X5 SUV 2007", "BMW X6 SUV 2012", "BMW M3 Coupe 2012",
    "BMW M5 Sedan 2010",
)
CARS_CLASS_NAMES = _CARS_HEAD + tuple(f"Stanford Cars class {i + 1}" for i in range(len(_CARS_HEAD), 196))


def _stable(*parts) -> tuple:
    # str hash is salted per process: derive stable integers from the text instead
    return tuple(int.from_bytes(str(p).encode()[:8].ljust(8, b"_"), "little") % (2 ** 31) + len(str(p))
                 for p in parts)


def _pic(parts: tuple, k: int, seed: int) -> Image.Image:
    ident = np.random.default_rng([seed, *_stable(*parts)])
    colour = tuple(int(v) for v in ident.integers(30, 230, 3))
    marks = int(ident.integers(1, 4))
    view = np.random.default_rng([seed, 7, k, *_stable(*parts)])
    bg = np.clip(view.integers(0, 255, 3) + view.normal(0, 10, (PX, PX, 3)), 0, 255).astype(np.uint8)
    im = Image.fromarray(bg, "RGB")
    d = ImageDraw.Draw(im)
    s = PX * view.uniform(0.5, 0.7)
    x, y = view.uniform(0, PX - s, 2)
    d.ellipse((x, y, x + s, y + s), fill=colour)
    for j in range(marks):
        xx = x + (j + 1) * s / (marks + 1)
        d.line([(xx, y + s * 0.3), (xx, y + s * 0.8)], fill=(15, 15, 15), width=2)
    return im


def _write_cub(root: Path, seed: int, per_class: int = 5) -> dict[str, list[str]]:
    """``CUB_200_2011/`` with images, classes.txt, images.txt, image_class_labels.txt,
    train_test_split.txt, bounding_boxes.txt; returns {group: class names}."""
    classes = {cid: name for g, names in CUB_GROUPS.items() for cid, name in zip(CUB_GROUP_IDS[g], names)}
    classes.update({1: "Black_footed_Albatross", 200: "Common_Yellowthroat"})   # outside the FPR groups
    root.mkdir(parents=True, exist_ok=True)
    images, labels, split, boxes = [], [], [], []
    img_id = 0
    for cid in sorted(classes):
        folder = f"{cid:03d}.{classes[cid]}"
        for k in range(per_class):
            img_id += 1
            rel = f"{folder}/{classes[cid]}_{k + 1:04d}_{100 + img_id}.jpg"
            p = root / "images" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            _pic(("cub", cid), k, seed).save(p, quality=90)
            images.append(f"{img_id} {rel}")
            labels.append(f"{img_id} {cid}")
            split.append(f"{img_id} {int(k % 2 == 0)}")
            boxes.append(f"{img_id} 4.0 4.0 30.0 30.0")
    (root / "classes.txt").write_text("".join(f"{c} {c:03d}.{n}\n" for c, n in sorted(classes.items())))
    for name, lines in (("images.txt", images), ("image_class_labels.txt", labels),
                        ("train_test_split.txt", split), ("bounding_boxes.txt", boxes)):
        (root / name).write_text("\n".join(lines) + "\n")
    return {g: list(n) for g, n in CUB_GROUPS.items()}


def _write_wildlife(root: Path, seed: int) -> dict[str, list[str]]:
    """``WildlifeReID-10k/metadata.csv`` + ``images/``: per species two identities with 6 and 5
    images and one with 2 (too few for a gallery: never drawn); returns {species: drawn identities}."""
    import pandas as pd

    rows, drawn = [], {}
    for sp, src in WILDLIFE_SOURCES.items():
        drawn[sp] = []
        for i, n in enumerate((6, 5, 2)):
            ident = f"{src}_{i:03d}"
            if n >= 5:
                drawn[sp].append(ident)
            for k in range(n):
                rel = f"images/{src}/{ident}/{k:03d}.jpg"
                p = root / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                _pic(("reid", sp, i), k, seed).save(p, quality=90)
                rows.append({"image_id": len(rows), "identity": ident, "path": rel,
                             "date": f"2020-0{1 + k % 9}-1{i}", "orientation": ("left", "right", "front")[k % 3],
                             "species": sp, "split": "train" if k < n - 1 else "test", "dataset": src})
    pd.DataFrame(rows).to_csv(root / "metadata.csv", index=False)
    return drawn


def write_fpr_downloads(downloads_dir: str | Path, seed: int = 0) -> list[str]:
    """The hand downloads of the FPR tables (CUB-200-2011, WildlifeReID-10k) and two methods' generated
    images for each of the nine galleries; returns the folders written (relative names)."""
    dl = Path(downloads_dir)
    cub = _write_cub(dl / CUB_DIRNAME, seed)
    reid = _write_wildlife(dl / WILDLIFE_DIRNAME, seed)
    per_key = {f"cub_{g}": names for g, names in cub.items()}
    per_key.update(reid)
    per_key["stanford_cars"] = [CARS_CLASS_NAMES[lab] for lab in CARS_LABELS]
    for mi, method in enumerate(GENERATED_METHODS):
        for key, names in per_key.items():
            for ni, name in enumerate(names):
                p = dl / GENERATED_DIRNAME / method / key / name / "0.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                _pic(("gen", key, ni), 20 + mi, seed).save(p)
    return [CUB_DIRNAME, WILDLIFE_DIRNAME, GENERATED_DIRNAME]


# --------------------------------------------------------------------------- hub: dataset + models
def _cars_card(splits: dict[str, tuple[int, int]]) -> str:
    """The card of ``Donghyun99/Stanford-Cars`` as the hub lays it out: ``dataset_info`` with an
    ``image`` feature and a ``label`` class label listing the 196 model names."""
    lines = ["---", "language:", "- en", "task_categories:", "- image-classification", "dataset_info:",
             "  features:", "  - name: image", "    dtype: image", "  - name: label", "    dtype:",
             "      class_label:", "        names:"]
    lines += [f"          '{i}': {n}" for i, n in enumerate(CARS_CLASS_NAMES)]
    lines += ["  splits:"] + [f"  - name: {s}\n    num_bytes: {b}\n    num_examples: {n}"
                              for s, (n, b) in splits.items()]
    lines += ["configs:", "- config_name: default", "  data_files:"]
    lines += [f"  - split: {s}\n    path: data/{s}-*" for s in splits]
    lines += ["---", "", "# Stanford Cars", "",
              "Dry-run fixture in the published schema of Donghyun99/Stanford-Cars (tiny images).", ""]
    return "\n".join(lines)


def write_cars_dataset(hub_dir: str | Path, seed: int = 0, per_label: int = 5) -> str:
    """``Donghyun99/Stanford-Cars`` into the mirror: ``test`` holds ``per_label`` images of each of the
    authors' labels and of two other labels, ``train`` a few; returns the repo id."""
    import datasets

    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CARS_CLASS_NAMES))})
    cols: dict[str, dict] = {}
    for split, labs, n in (("train", (0, 1, 5), 2), ("test", (0, *CARS_LABELS, 5), per_label)):
        c = {"image": [], "label": []}
        for k in range(n):                      # interleaved by label, as a shuffled split is
            for lab in labs:
                c["image"].append(_png(_pic(("cars", lab), k + (0 if split == "test" else 50), seed)))
                c["label"].append(lab)
        cols[split] = c
    card = _cars_card({s: (len(c["label"]), sum(len(im["bytes"]) + 8 for im in c["image"]))
                       for s, c in cols.items()})
    write_dataset_repo(Path(hub_dir) / CARS_REPO, cols, feats, card)
    return CARS_REPO


def _save_bioclip(path: Path) -> None:
    """A tiny open_clip ``CLIP`` in BioCLIP 2's repo layout (``open_clip_config.json`` with
    ``model_cfg`` / ``preprocess_cfg``, ``open_clip_model.safetensors``)."""

    import open_clip
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(6)
    model = open_clip.CLIP(**copy.deepcopy(TINY_OPEN_CLIP))
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "open_clip_model.safetensors"))
    cfg = {"model_cfg": TINY_OPEN_CLIP,
           "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073],
                              "std": [0.26862954, 0.26130258, 0.27577711]}}
    (path / "open_clip_config.json").write_text(json.dumps(cfg, indent=2))


def write_fpr_models(hub_dir: str | Path) -> list[str]:
    """The FPR encoders' tiny models and the Stanford Cars dataset into the mirror; returns the repo ids."""
    import torch
    from transformers import CLIPConfig, CLIPModel, Dinov2Config, Dinov2Model

    hub = Path(hub_dir)
    torch.manual_seed(7)
    CLIPModel(CLIPConfig(text_config=_TEXT, vision_config={**_VISION, "projection_dim": 16},
                         projection_dim=16)).save_pretrained(hub / "openai" / "clip-vit-base-patch32")
    torch.manual_seed(8)
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                             image_size=32, patch_size=8)).save_pretrained(hub / "facebook" / "dinov2-base")
    _save_bioclip(hub / "imageomics" / "bioclip-2")
    write_cars_dataset(hub)
    return ["openai/clip-vit-base-patch32", "facebook/dinov2-base", "imageomics/bioclip-2", CARS_REPO,
            *write_carvekit_standin(hub)]


def _standin_state(module, seed: int, scale: float = 0.05) -> dict:
    """``module``'s state dict with every float tensor a stride-0 view of one shared pool of seeded
    values (per output channel along the first dimension), BatchNorm variances 1: torch.save stores
    the pool once."""
    import torch

    pool = (torch.rand(4096, generator=torch.Generator().manual_seed(seed)) * 2 - 1) * scale
    out = {}
    for k, v in module.state_dict().items():
        if not v.is_floating_point():
            out[k] = v.clone()
        elif "running_var" in k:
            out[k] = torch.ones(1).expand(v.shape)
        elif v.ndim == 0:
            out[k] = pool[0].clone()
        else:
            n = v.shape[0] if v.shape[0] <= pool.numel() else 1
            out[k] = pool[:n].as_strided(tuple(v.shape), ((1 if n > 1 else 0),) + (0,) * (v.ndim - 1))
    return out


def write_carvekit_standin(hub_dir: str | Path) -> list[str]:
    """Stand-in weights of carvekit's TRACER-B7 and FBA matting networks in the mirror (module
    docstring); nothing when carvekit is not installed (the step then says so)."""
    try:
        from carvekit.ml.wrap.fba_matting import FBAMatting
        from carvekit.ml.wrap.tracer_b7 import TracerUniversalB7
    except ImportError:
        return []
    import torch

    hub = Path(hub_dir)
    seg = TracerUniversalB7(device="cpu", input_image_size=64, batch_size=1, load_pretrained=False,
                            model_path=str(hub / TRACER_REPO / TRACER_FILE))
    fba = FBAMatting(device="cpu", input_tensor_size=64, batch_size=1, load_pretrained=False)
    for repo, fname, module, seed in ((TRACER_REPO, TRACER_FILE, seg, 31), (FBA_REPO, FBA_FILE, fba, 32)):
        (hub / repo).mkdir(parents=True, exist_ok=True)
        torch.save(_standin_state(module, seed), hub / repo / fname)
    return [TRACER_REPO, FBA_REPO]
