"""The released ID-Sim checkpoints as rows of ID-Sim's public benchmark tables (Figure 25, Tables
2a / 2b, notebook 09): every checkpoint of :data:`~.release_backbones.RELEASES` whose repository
and base can be read, scored with its CLS and its pooled-patch embedding, one loaded at a time; the
others with the reason (not in the mirror, with the download command)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .public_eval import public_scores
from .release_backbones import PRIMARY, RELEASES
from ..features.profile_encoders import idsim_release_row
from .release_model import release_available

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["RELEASE_LABELS", "release_rows", "row_name", "table2a_row", "patch_column"]

# Table 2a row / Table 2b column / Figure 25 model of each checkpoint (the paper's is "Ours (ViT-L)" / "ours" / "ID-Sim")
RELEASE_LABELS = {name: (("Ours (ViT-L)", "ours", "ID-Sim") if name == PRIMARY else
                         (f"Ours ({spec.label[len('ID-Sim ('):-1]})",
                          "ours_" + name[len("idsim-release-"):].replace("-", "_"), spec.label))
                  for name, spec in RELEASES.items()}


def row_name(name: str) -> str:
    """Figure 25's model key of a checkpoint's rows (``ID-Sim`` for the paper's, else its label)."""
    return RELEASE_LABELS[name][2]


def table2a_row(name: str) -> str:
    return RELEASE_LABELS[name][0]


def patch_column(name: str) -> str:
    return RELEASE_LABELS[name][1]


def release_rows(cfg: Profile, s2k, pairs, batch_size: int, log: Callable[[str], None] = print) -> dict:
    """``{name: {"pooled", "patch", "scores", "label", "patch_label"} or {"missing": reason}}`` for
    every released checkpoint, the paper's first (``idsim.released_model`` under ``idsim-release``),
    each loaded, scored on both public benchmarks and dropped before the next."""
    out: dict[str, dict] = {}
    for name, spec in RELEASES.items():
        repo = cfg.idsim.released_model if name == PRIMARY else spec.repo
        why = release_available(repo, spec.base)
        rel = None
        if why is None:
            try:
                rel = idsim_release_row(cfg, name=name)
            except (OSError, ValueError, KeyError, TypeError) as err:     # HubError is an OSError
                why = f"released ID-Sim checkpoint {repo} not loaded: {err}"
        if rel is None:
            out[name] = {"missing": why}
            log(why)
            continue
        where = f"{repo} over {rel.info['base']}, {rel.preprocess.image_size} px"
        scores: dict = {}
        out[name] = {"pooled": public_scores(rel, s2k, pairs, batch_size, scores=scores),
                     "patch": public_scores(rel, s2k, pairs, batch_size, "patch"), "scores": scores,
                     "label": f"released {spec.label}, CLS embedding ({where}; LoRA merged into transformers)",
                     "patch_label": f"released {spec.label}, mean of its L2-normalised mlp_patch embeddings ({where})"}
        del rel
    return out
