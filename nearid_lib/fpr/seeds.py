"""The specialised encoder's other training seeds, scored only for the claims.

FPR's claims 2-4 judge the specialised encoder (the NearID head in ``mini``). A trained head is one
draw of its training; notebook 03 trains three and publishes them all
(:mod:`nearid_lib.models.published`). The tables and figures of notebook 11 keep the published
head (the notebook's own seed); :func:`specialised_seed_runs` scores each other seed's head with
the same protocol (oracle, generated images, background ablation) so
:func:`~nearid_lib.fpr.claims.retrieval_claims` can average the claims' quantities over the seeds and
carry their spread."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import pandas as pd

from ..models import load_encoder
from .ablations import background_ablation
from .experiments import EncoderSpec, run_fpr

if TYPE_CHECKING:
    from ..config import Profile
    from ..data.fpr_layout import FPRSplit

__all__ = ["specialised_seed_runs"]


def specialised_seed_runs(spec: EncoderSpec, seed_dirs: Mapping[int, str | Path], split: FPRSplit,
                          generated: pd.DataFrame | None, cfg: Profile, cache, dataset: str,
                          oracle: bool = True, background: bool = True,
                          removed: tuple[pd.DataFrame, pd.DataFrame] | None = None
                          ) -> dict[int, dict[str, pd.DataFrame]]:
    """{seed: {"per_query", "agreement", "oracle_pq", "bg_pq"}} of the heads in ``seed_dirs``
    ({seed: checkpoint folder}, e.g. :func:`~nearid_lib.models.published.published_seeds`) other
    than the one ``spec`` loads (its ``checkpoint``), each loaded with ``spec``'s options and scored
    under ``spec.name`` exactly as :func:`~.experiments.run_fpr` and
    :func:`~.ablations.background_ablation` score the published head (``removed``: the
    background-removed tables of the paper profile, as for the published head). Empty when ``spec`` is
    unavailable or loads something other than a local folder (a hub id: one seed)."""
    own = spec.kwargs.get("checkpoint")
    if not spec.available or own is None or not Path(own).is_dir():
        return {}
    out = {}
    for seed, d in seed_dirs.items():
        if Path(d).resolve() == Path(own).resolve():
            continue
        model = load_encoder(spec.name, cache=True, **{**spec.kwargs, "checkpoint": str(d)})[0]
        models = {spec.name: model}
        res = run_fpr(models, split, generated, cfg, cache, dataset, oracle=oracle, progress=False)
        bg_pq = (background_ablation(models, split.train, split.gallery, cfg, cache, dataset, per_query=True,
                                     removed=removed)[1]
                 if background else None)
        out[int(seed)] = {"per_query": res.per_query, "agreement": res.agreement,
                          "oracle_pq": res.oracle_per_query, "bg_pq": bg_pq}
    return out
