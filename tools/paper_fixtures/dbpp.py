"""Dry-run fixture of the NearID authors' per-image DreamBench++ scores
(``dreambench_plus/ratings`` of ``Gorluxor/NearID``) in its exact layout: every scorer folder the
release has (keys with and without the ``_<k>`` image suffix, the ``rubik's_cube`` / ``magic_cube``
alias), GPT under ``concept_preservation_full``, two human groups of 0-4 integers. Scores are
drawn from one latent concept-preservation value per image, so every scorer correlates with the
humans to a different, known-in-advance degree."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["FIXTURE_METHODS", "FIXTURE_SUBJECTS", "write_ratings", "fixture_keys"]

FIXTURE_METHODS = ("textual_inversion_sd", "dreambooth_sd", "emu2")
# category -> subjects (object 01 is the cube the metric files call rubik's_cube)
FIXTURE_SUBJECTS = {"live_subject_animal": ("kitten", "corgi"), "live_subject_human": ("girl", "man"),
                    "object": ("backpack", "magic_cube"), "style": ("ink", "mosaic")}
N_PROMPTS = 3
# scorer -> (noise of the metric around the latent value, image suffix "_0" on its keys, scale)
_SCORERS = {"nearid": (0.4, True, 1.0), "backbone": (0.6, True, 1.0), "backbone_maphead": (0.7, True, 1.0),
            "vsm": (2.0, True, 1.0), "dino": (0.8, False, 100.0), "clipi": (0.9, False, 100.0),
            "qwen3vl_30b": (0.5, False, None), "gpt": (0.5, False, None)}


def fixture_keys(metric: bool = False, suffix: bool = False) -> list[str]:
    """The image keys of one method's file, in the release's order (categories, subjects, prompts);
    ``metric=True`` names the cube as the metric files do, ``suffix=True`` adds ``_0``."""
    out = []
    for cat, subjects in FIXTURE_SUBJECTS.items():
        for i, subj in enumerate(subjects):
            name = "rubik's_cube" if (metric and subj == "magic_cube") else subj
            for p in range(N_PROMPTS):
                out.append(f"{cat}_{i:02d}_{name}-{p}" + ("_0" if suffix else ""))
    return out


def _write(path: Path, keys: list[str], values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in zip(keys, values)}, indent=1))


def write_ratings(root: str | Path, seed: int = 0) -> Path:
    """Write the ratings folder at ``root`` (``.../dreambench_plus/ratings``); returns it."""
    root = Path(root)
    n = len(fixture_keys())
    for mi, method in enumerate(FIXTURE_METHODS):
        rng = np.random.default_rng([seed, 7, mi])
        latent = rng.uniform(0, 4, n)                       # the image's true concept preservation
        for g in (1, 2):
            h = np.clip(np.rint(latent + rng.normal(0, 0.6, n)), 0, 4).astype(int)
            _write(root / "data_human_rating" / "merged_data" / f"group{g}" / f"{method}-cp.json",
                   fixture_keys(), h.tolist())
        for scorer, (noise, suffix, scale) in _SCORERS.items():
            v = latent + rng.normal(0, noise, n)
            if scale is None:                                # judges answer 0-4 integers
                vals = np.clip(np.rint(v), 0, 4).astype(int).tolist()
            else:
                vals = [round(float(x), 4) for x in (v / 4 * scale)]
            folder = root / f"data_{scorer}_rating"
            if scorer == "gpt":
                folder = folder / "concept_preservation_full"
            _write(folder / f"{method}.json", fixture_keys(metric=scorer not in ("gpt",), suffix=suffix), vals)
    return root
