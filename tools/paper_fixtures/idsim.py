"""ID-Sim part of the dry-run mirror: the public ID-Sim benchmarks in their publishers' layouts.

- :func:`write_idsim_downloads`: DreamBench++ as its publishers lay it out (the evaluation data zip,
  the methods' samples, the human and GPT rating zips unpacked side by side, exactly what
  :func:`nearid_lib.data.eval_datasets.load_dreambenchpp` reads and the release's own ``pearson.py``
  reads): ``data/images/<category>/<NN>.jpg``, ``data/captions/<category>/<NN>.txt``,
  ``samples/<method folder>/tgt_image/<collection_id>/<k>_0.jpg``,
  ``data_human_rating/merged_data/group{1,2}/<method>-{cp,pf}.json`` and
  ``data_gpt_rating/concept_preservation_full/<method>.json``.
- :func:`write_idsim_models`: the Subjects2k hub dataset (``chaenayo/Subjects2k``) in its published
  schema (:func:`subjects2k_features`: ``reference_image``, ``test_image``, ``pair_id``,
  ``human_votes``, ``human_agreement``, ``binary_label``, ``num_human_votes``, ``gpt_score``) and
  :func:`write_idsim_backbones`: a tiny random-init ``DINOv3ViTModel`` under
  ``facebook/dinov3-vitl16-pretrain-lvd1689m`` (the frozen DINOv3 row of ID-Sim's tables) and a tiny
  released ID-Sim over it under ``chaenayo/id-sim_dinov3_vitl16_cls_patch`` in the release's exact
  file layout (:func:`write_idsim_release`: ``adapter_config.json`` as PEFT writes it,
  ``adapter_model.safetensors`` with the LoRA of every block's fused qkv in Meta's key space,
  ``mlp_cls.pth`` / ``mlp_patch.pth`` residual-head state dicts), which
  :mod:`nearid_lib.idsim.release_model` loads. DINOv2, CLIP, SigLIP2 and the Qwen3-VL judge come from
  :mod:`.nearid`.

Images are tiny procedural scenes (:mod:`.nearid`'s shapes): a "generated" image of a subject keeps
its shape and colour with a probability that falls with the method's drift, and the human ratings
follow that (with rater noise), so the metrics have something to find.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from nearid_lib.data.eval_datasets import DBPP_DIRNAME, DBPP_METHOD_DIRS, dbpp_collection_id
from nearid_lib.idsim.release_backbones import PRIMARY, RELEASES
from nearid_lib.idsim.release_model import BASE_REPO, RELEASE_REPO
from .nearid import _COLOURS, _SHAPES, _background, _draw, _png, _view_box, write_dataset_repo

__all__ = ["DBPP_FIXTURE_SUBJECTS", "DBPP_FIXTURE_METHODS", "subjects2k_features", "write_dreambenchpp",
           "write_idsim_downloads", "write_subjects2k", "write_idsim_models", "write_idsim_backbones",
           "write_idsim_release", "write_idsim_other_releases", "TINY_DINOV3"]

PX = 48
# (category folder, NN, subject name) of the fixture's reference images
DBPP_FIXTURE_SUBJECTS = (("animal", "00", "dog"), ("animal", "01", "grey cat"), ("object", "00", "backpack"),
                         ("object", "01", "red mug"))
# rating key of three of the release's methods -> how far its samples drift from the subject
DBPP_FIXTURE_METHODS = {"dreambooth_sd": 0.2, "blip_diffusion": 0.5, "emu2": 0.8}
N_PROMPTS = 3


def _save_jpg(im: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, format="JPEG", quality=90)


def _scene(rng: np.random.Generator, shape: str, colour: str, stripes: int) -> Image.Image:
    im = _background(rng, PX)
    _draw(im, _view_box(rng, PX), shape, _COLOURS[colour], stripes)
    return im


def write_dreambenchpp(root: Path, seed: int = 0) -> Path:
    """A tiny DreamBench++ in its publishers' layout under ``root``; returns ``root``."""
    root = Path(root)
    rng = np.random.default_rng([seed, 21])
    colours = list(_COLOURS)
    human = {g: {m: {} for m in DBPP_FIXTURE_METHODS} for g in ("group1", "group2")}
    gpt = {m: {} for m in DBPP_FIXTURE_METHODS}
    for si, (cat, nn, name) in enumerate(DBPP_FIXTURE_SUBJECTS):
        shape, colour, stripes = _SHAPES[si % len(_SHAPES)], colours[si % len(colours)], 1 + si % 3
        _save_jpg(_scene(rng, shape, colour, stripes), root / "data" / "images" / cat / f"{nn}.jpg")
        prompts = [f"a photo of {name} {w}" for w in ("on a beach", "in the snow", "on a table", "in a forest",
                                                        "at night", "in a city", "on grass", "under water",
                                                        "in a kitchen")]
        cap = root / "data" / "captions" / cat / f"{nn}.txt"
        cap.parent.mkdir(parents=True, exist_ok=True)
        cap.write_text("\n".join([name, *prompts]) + "\n", encoding="utf-8")
        cid = dbpp_collection_id(cat, nn, name)
        for mi, (method, drift) in enumerate(DBPP_FIXTURE_METHODS.items()):
            for k in range(N_PROMPTS):
                keep = 1.0 - drift * rng.random()         # how much of the subject survives, in [1 - drift, 1]
                s_shape = shape if keep > 0.5 else _SHAPES[(si + 1) % len(_SHAPES)]
                s_colour = colour if keep > 0.35 else colours[(si + 2) % len(colours)]
                s_str = stripes if keep > 0.7 else 1 + (stripes + 1) % 3
                img = root / "samples" / DBPP_METHOD_DIRS[method] / "tgt_image" / cid / f"{k}_0.jpg"
                _save_jpg(_scene(rng, s_shape, s_colour, s_str), img)
                key = f"{cid}-{k}"
                for g in human:
                    cp = int(np.clip(round(4 * keep + rng.normal(0, 0.6)), 0, 4))
                    human[g][method][key] = [cp, int(rng.integers(0, 5))]
                gpt[method][key] = int(np.clip(round(4 * keep + rng.normal(0, 1.0)), 0, 4))
    for g, per in human.items():
        d = root / "data_human_rating" / "merged_data" / g
        d.mkdir(parents=True, exist_ok=True)
        for method, rows in per.items():
            rows = dict(sorted(rows.items()))
            (d / f"{method}-cp.json").write_text(json.dumps({k: v[0] for k, v in rows.items()}, indent=4))
            (d / f"{method}-pf.json").write_text(json.dumps({k: v[1] for k, v in rows.items()}, indent=4))
    d = root / "data_gpt_rating" / "concept_preservation_full"
    d.mkdir(parents=True, exist_ok=True)
    for method, rows in gpt.items():
        (d / f"{method}.json").write_text(json.dumps(dict(sorted(rows.items())), indent=4))
    # the GPT score's two subject prompts where the repository keeps them: stand-in text of our own
    # (DreamBench++'s wording is theirs and is read from a real download only), same roles and format
    prompts = root / "dreambench_plus" / "prompts"
    prompts.mkdir(parents=True, exist_ok=True)
    (prompts / "user_prompt_subject_full.txt").write_text(
        "Stand-in rubric (dry run). Two images follow: a reference, then a generated image. Rate how well the "
        "generated subject keeps the reference subject's look, 0 (unrelated) to 4 (the same). Reply as: Score: N\n")
    (prompts / "gpt_prompt_subject_full.txt").write_text(
        "Understood: I will compare the two subjects and answer only with Score: N, N from 0 to 4.\n")
    return root


def write_idsim_downloads(downloads_dir: str | Path, seed: int = 0) -> list[str]:
    """The hand-downloaded ID-Sim benchmarks into ``downloads_dir`` (DreamBench++ under
    ``dreambenchpp/``, the folder the paper profile reads); returns what was written."""
    write_dreambenchpp(Path(downloads_dir) / DBPP_DIRNAME, seed=seed)
    return [DBPP_DIRNAME]


def subjects2k_features():
    """The published features of ``chaenayo/Subjects2k`` (its dataset viewer's schema)."""
    import datasets

    return datasets.Features({
        "reference_image": datasets.Image(), "test_image": datasets.Image(), "pair_id": datasets.Value("string"),
        "human_votes": datasets.Sequence(datasets.Value("int64")), "human_agreement": datasets.Value("float32"),
        "binary_label": datasets.Value("int8"), "num_human_votes": datasets.Value("int16"),
        "gpt_score": datasets.Value("int16")})


def _s2k_card(n: int) -> str:
    dtypes = {"reference_image": "image", "test_image": "image", "pair_id": "string", "human_agreement": "float32",
              "binary_label": "int8", "num_human_votes": "int16", "gpt_score": "int16"}
    lines = ["---", "dataset_info:", "  features:"]
    for name in ("reference_image", "test_image", "pair_id", "human_votes", "human_agreement", "binary_label",
                 "num_human_votes", "gpt_score"):
        if name == "human_votes":
            lines += [f"    - name: {name}", "      sequence: int64"]
        else:
            lines += [f"    - name: {name}", f"      dtype: {dtypes[name]}"]
    lines += ["  splits:", "    - name: train", f"      num_examples: {n}", "configs:", "  - config_name: default",
              "    data_files:", "      - split: train", "        path: data/train-*", "---", "", "# Subjects2k", "",
              "Dry-run fixture in the published schema of Subjects2k (tiny procedural pairs).", ""]
    return "\n".join(lines)


def write_subjects2k(repo_dir: Path, n_pairs: int = 16, seed: int = 0) -> Path:
    """``chaenayo/Subjects2k`` as ``huggingface-cli download --local-dir`` leaves it: one split of
    ``n_pairs`` pairs, a quarter of them "same" (the release: 473 of 2,000); votes follow the pair
    (same: mostly 1) and ``binary_label`` = agreement >= 0.8 as in the release's rows."""
    rng = np.random.default_rng([seed, 22])
    colours = list(_COLOURS)
    cols = {c: [] for c in subjects2k_features()}
    for i in range(n_pairs):
        shape, colour, stripes = _SHAPES[i % 3], colours[i % len(colours)], 1 + i % 3
        same = i % 4 == 0 or i % 7 == 3
        ref = _scene(rng, shape, colour, stripes)
        test = _scene(rng, shape, colour, stripes) if same else \
            _scene(rng, shape, colours[(i + 1 + i % 2) % len(colours)] if i % 2 else colour, 1 + (stripes % 3))
        n_votes = int(rng.integers(3, 9))
        p = 0.9 if same else 0.2
        votes = [int(v) for v in (rng.random(n_votes) < p)]
        agree = sum(votes) / n_votes
        cols["reference_image"].append(_png(ref))
        cols["test_image"].append(_png(test))
        cols["pair_id"].append(f"{37 * i + 28:06d}")
        cols["human_votes"].append(votes)
        cols["human_agreement"].append(agree)
        cols["binary_label"].append(int(agree >= 0.8))
        cols["num_human_votes"].append(n_votes)
        cols["gpt_score"].append(int(np.clip(round(5 * agree + rng.normal(0, 1.2)), 0, 5)))
    if not any(cols["binary_label"]):                      # AP needs both classes: pair 0 is a "same" pair
        n0 = cols["num_human_votes"][0]
        cols["human_votes"][0], cols["human_agreement"][0], cols["binary_label"][0] = [1] * n0, 1.0, 1
    return write_dataset_repo(repo_dir, {"train": cols}, subjects2k_features(), _s2k_card(n_pairs))


# the tiny random-init DINOv3 of the mirror (its size is the dry run's idsim.image_size, 32 px)
TINY_DINOV3 = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                   patch_size=8, num_register_tokens=2)


def write_idsim_release(repo_dir: str | Path, hidden_size: int, num_layers: int, rank: int = 4, alpha: float = 8.0,
                        head_hidden: int = 16, use_rslora: bool = False, seed: int = 7) -> Path:
    """A tiny released ID-Sim in the release's exact file layout under ``repo_dir``: the four files
    of ``chaenayo/id-sim_dinov3_vitl16_cls_patch`` (:data:`nearid_lib.idsim.release_model.RELEASE_FILES`)
    for a base of width ``hidden_size`` and ``num_layers`` blocks. The LoRA is random and non-zero
    (B too: a trained adapter, not a fresh one), keys in Meta's key space as PEFT saves them
    (``base_model.model.extractor.model.blocks.N.attn.qkv.lora_{A,B}.weight``: A [r, D], B [3D, r]);
    the heads have random weights and ``beta_logit``."""
    import torch
    from safetensors.torch import save_file

    repo_dir = Path(repo_dir)
    repo_dir.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    D = hidden_size
    tensors = {}
    for n in range(num_layers):
        key = f"base_model.model.extractor.model.blocks.{n}.attn.qkv"
        tensors[f"{key}.lora_A.weight"] = torch.randn(rank, D, generator=g) / D ** 0.5
        tensors[f"{key}.lora_B.weight"] = 0.2 * torch.randn(3 * D, rank, generator=g)
    save_file(tensors, str(repo_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    # the fields PEFT writes (peft 0.21, LoRA on a non-transformers module)
    config = {"peft_type": "LORA", "task_type": None, "base_model_name_or_path": None, "revision": None,
              "inference_mode": True, "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0, "bias": "none",
              "target_modules": ["qkv"], "use_rslora": use_rslora, "use_dora": False, "fan_in_fan_out": False,
              "init_lora_weights": True, "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
              "layers_to_transform": None, "layers_pattern": None, "layer_replication": None, "lora_bias": False,
              "megatron_config": None, "megatron_core": "megatron.core", "loftq_config": {},
              "exclude_modules": None, "target_parameters": None, "trainable_token_indices": None}
    (repo_dir / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in ("mlp_cls", "mlp_patch"):
        head = {"ln.weight": 1.0 + 0.1 * torch.randn(D, generator=g), "ln.bias": 0.1 * torch.randn(D, generator=g),
                "fc1.weight": torch.randn(head_hidden, D, generator=g) / D ** 0.5,
                "fc1.bias": 0.1 * torch.randn(head_hidden, generator=g),
                "fc2.weight": torch.randn(D, head_hidden, generator=g) / head_hidden ** 0.5,
                "fc2.bias": 0.1 * torch.randn(D, generator=g), "beta_logit": torch.tensor(-1.0)}
        torch.save(head, repo_dir / f"{name}.pth")
    return repo_dir


def write_idsim_backbones(hub_dir: str | Path) -> list[str]:
    """The tiny random-init DINOv3 (:data:`TINY_DINOV3`) under ``facebook/dinov3-vitl16-pretrain-lvd1689m``
    and the tiny released ID-Sim over it (:func:`write_idsim_release`) under
    ``chaenayo/id-sim_dinov3_vitl16_cls_patch``; returns the repo ids."""
    import torch
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    hub_dir = Path(hub_dir)
    torch.manual_seed(6)
    DINOv3ViTModel(DINOv3ViTConfig(**TINY_DINOV3)).save_pretrained(hub_dir / BASE_REPO)
    write_idsim_release(hub_dir / RELEASE_REPO, TINY_DINOV3["hidden_size"], TINY_DINOV3["num_hidden_layers"])
    return [BASE_REPO, RELEASE_REPO]


def write_idsim_other_releases(hub_dir: str | Path) -> list[str]:
    """The authors' three other released checkpoints (:data:`~nearid_lib.idsim.release_backbones.RELEASES`)
    in the release layout over tiny bases: a tiny DINOv3 under ``facebook/dinov3-vitb16-pretrain-lvd1689m``
    (written here) and the tiny DINOv2 models the mirror holds under ``facebook/dinov2-large`` /
    ``facebook/dinov2-base`` (:mod:`.nearid`, :mod:`.fpr`: width 32, 2 blocks). Returns the repo ids."""
    import torch
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    hub_dir = Path(hub_dir)
    out = []
    for i, (name, spec) in enumerate(RELEASES.items()):
        if name == PRIMARY:
            continue
        if spec.family == "dinov3" and not (hub_dir / spec.base / "config.json").exists():
            torch.manual_seed(16 + i)
            DINOv3ViTModel(DINOv3ViTConfig(**TINY_DINOV3)).save_pretrained(hub_dir / spec.base)
            out.append(spec.base)
        write_idsim_release(hub_dir / spec.repo, 32, 2, seed=20 + i)
        out.append(spec.repo)
    return out


def write_idsim_models(hub_dir: str | Path) -> list[str]:
    """The Subjects2k dataset repo, a tiny random-init DINOv3 and the tiny released ID-Sim over it,
    and the three other released checkpoints (:func:`write_idsim_other_releases`), under the paper's
    ids in ``hub_dir``."""
    hub_dir = Path(hub_dir)
    write_subjects2k(hub_dir / "chaenayo" / "Subjects2k")
    return ["chaenayo/Subjects2k", *write_idsim_backbones(hub_dir), *write_idsim_other_releases(hub_dir)]
