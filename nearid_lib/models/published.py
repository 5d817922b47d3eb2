"""The NearID heads later notebooks load: notebook 03's trained runs published under
``checkpoint_dir(profile)/"nearid"``, every training seed of them.

The notebook's own seed is the folder itself (what ``load_encoder("nearid", checkpoint=...)`` reads,
as before); each other seed's head sits under ``seeds/seed<k>/`` and :data:`SEEDS_FILE` lists them
all, so a claim that judges the head (notebooks 10 and 11) averages over the trainings and carries
their spread (:mod:`nearid_lib.claims`), as ID-Sim's seeds do
(:func:`nearid_lib.idsim.model.load_idsim_seeds`). A folder published before seeds were kept is one
seed."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Mapping

from ..io_utils import write_json
from ..paths import seed_checkpoint_dir as seed_dir

__all__ = ["SEEDS_FILE", "publish_seeds", "published_seeds", "seed_dir"]

SEEDS_FILE = "seeds.json"
_SKIP = shutil.ignore_patterns("resume", "units_*", "mtg_*", "seeds")


def publish_seeds(runs: Mapping[int, str | os.PathLike], own: int, directory: str | os.PathLike) -> Path:
    """Copy the finished run folders ``runs`` ({seed: run folder}) to ``directory``: seed ``own``
    into the folder itself, the others under :func:`seed_dir` (the resume states and per-unit
    score files stay behind), then write :data:`SEEDS_FILE` (own seed first). Replaces what was
    there. Raises KeyError when ``own`` is not among ``runs``."""
    if int(own) not in {int(s) for s in runs}:
        raise KeyError(f"publish_seeds: the own seed {own} is not among the runs' seeds {sorted(runs)}")
    directory = Path(directory)
    shutil.rmtree(directory, ignore_errors=True)
    by_seed = {int(s): Path(d) for s, d in runs.items()}
    shutil.copytree(by_seed[int(own)], directory, ignore=_SKIP)
    for s, d in sorted(by_seed.items()):
        if s != int(own):
            shutil.copytree(d, seed_dir(directory, s), ignore=_SKIP)
    seeds = [int(own)] + sorted(s for s in by_seed if s != int(own))
    write_json({"seed": int(own), "seeds": seeds}, directory / SEEDS_FILE)
    return directory


def published_seeds(directory: str | os.PathLike) -> dict[int, Path]:
    """{seed: head folder} of a published NearID head, its own seed first; a folder without
    :data:`SEEDS_FILE` is one seed (the ``seed`` of its run's ``config.json``, else 0). Raises
    FileNotFoundError naming a listed seed whose folder is missing."""
    directory = Path(directory)
    f = directory / SEEDS_FILE
    if not f.exists():
        cfg = directory / "config.json"
        return {int(json.loads(cfg.read_text()).get("seed", 0)) if cfg.exists() else 0: directory}
    meta = json.loads(f.read_text())
    own = int(meta["seed"])
    out = {own: directory}
    for s in meta.get("seeds", [own]):
        if int(s) != own:
            d = seed_dir(directory, s)
            if not d.is_dir():
                raise FileNotFoundError(f"NearID head {directory}: seed {s} is listed in {SEEDS_FILE} but "
                                        f"{d} is missing (rerun notebook 03)")
            out[int(s)] = d
    return out
