"""FPR's background removal on every GPU, before notebook 11 and outside its kernel (``make bgremove
PROFILE=paper``; the paper profile's notebook 11 depends on it).

``torchrun --standalone --nproc_per_node N -m nearid_lib.fpr.bg_step --profile paper`` runs one
process per GPU: the galleries ``make fpr-galleries`` built (:func:`~.downloads.built_galleries`; a
lone process builds them itself), then every rank removes the backgrounds of its share of their reference and gallery
images with carvekit at the FPR authors' settings (:func:`~.bg_removal.remove_backgrounds`:
copies written once, atomically, resumable per image). Notebook 11 then reads the copies for FPR
Table 14's "removed" rows (and writes any that are missing itself). Without a launch it is one
process; in a procedural world (smoke, mini: the world's own masks) it does nothing, and where
carvekit or its weights are absent it says why and writes nothing (notebook 11 records the reason).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from ..steps.runner import step_arguments
from ..data.fpr_layout import load_fpr_split
from ..runtime.launch import end_launch, launched_state
from ..models import resolve_device
from ..paths import data_dir
from .bg_removal import remove_backgrounds, weights_reason
from .downloads import DATASET_KEYS, built_galleries

__all__ = ["gallery_images", "main"]


def gallery_images(root: Path) -> list[str]:
    """Every reference and gallery image of the built galleries under ``root`` (one folder per
    paper dataset key), unique, in a fixed order."""
    out: list[str] = []
    for key in DATASET_KEYS:
        if (root / key / "train_data.csv").exists():
            sp = load_fpr_split(root / key)
            out += list(sp.train.file_path) + list(sp.gallery.file_path)
    return sorted(set(out))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.fpr.bg_step --profile paper [--set KEY=VALUE ...]``."""
    _, cfg = step_arguments(argv, __doc__)
    state = launched_state()
    rank, world = (state.process_index, state.num_processes) if state is not None else (0, 1)
    if cfg.world.source != "released":
        print("background removal: a procedural world removes backgrounds with its own masks; nothing to do")
        end_launch()
        return 0
    why = weights_reason()
    if why:
        print(f"background removal: not run: {why}")
        end_launch()
        return 0
    root = data_dir(cfg.name) / "fpr"
    built_galleries(cfg, world)          # built by make fpr-galleries; a lone process builds them itself
    device = str(state.device) if state is not None else str(resolve_device(cfg.device))
    info = remove_backgrounds(gallery_images(root), cfg.name, tuple(cfg.retrieval.bg_sizes), rank, world, device,
                              progress=rank == 0)
    if rank == 0:
        print(json.dumps(info, indent=1))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
