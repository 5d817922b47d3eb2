"""DreamBench++ metric-to-human alignment of a bench encoder (NearID Table 2, Figure 4).

With the profile's DreamBench++ ratings (:func:`dbpp_human`) every rated image is scored against its
subject's reference. DreamBench++ human ratings do not exist offline: with
``cfg.eval.dbpp_standin`` the M-H column is computed against a *procedural oracle*
(:func:`dbpp_standin` over :func:`~nearid_lib.nearid.pairs.grid_pairs`: reference = the unedited
cell, "generated" = every other cell, oracle = 1 - identity_change, "methods" = context-drift
levels, "categories" = the drifting factor). Such values are never called human: every table says
:data:`PROCEDURAL_NOTE`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd
from PIL import Image

from .. import metrics

if TYPE_CHECKING:
    from ..data import NearIDData
    from ..data.benchmarks import DreamBenchPP

__all__ = ["PROCEDURAL_NOTE", "dbpp_standin", "dbpp_human"]

PROCEDURAL_NOTE = "procedural oracle, not human (DreamBench++ stand-in from the world's edit grids)"


def dbpp_standin(benc, data: NearIDData, gp: pd.DataFrame, variant: str = "full"):
    """M-H of ``benc`` against the procedural oracle of :func:`grid_pairs` (NOT human ratings)."""
    if not len(gp):
        return None, np.zeros(0)
    s = benc.grid_scores(data, gp, variant)
    mh = metrics.metric_to_human(s, gp["oracle"].to_numpy(float), gp["method"].to_numpy(),
                                 gp["category"].to_numpy())
    mh["kind"] = "procedural"
    return mh, s


def dbpp_human(dbpp: DreamBenchPP, max_rows: int | None = None) -> Callable[[Any], tuple]:
    """M-H against DreamBench++ *human* ratings (``nearid_lib.data.benchmarks.load_dreambenchpp``):
    per rated image, s(reference image of its subject, generated image); returns a callable for
    :func:`~nearid_lib.nearid.evaluate.evaluate_encoder` ``(benc) -> (metric_to_human dict with
    kind="human", scores)``."""
    hum = dbpp.ratings[dbpp.ratings["rater"] == "human"].reset_index(drop=True)
    if max_rows is not None:
        hum = hum.iloc[:max_rows]
    ref = dbpp.subjects.drop_duplicates("subject").set_index("subject")
    cat = ref["category"].reindex(hum["subject"]).to_numpy()

    def run(benc):
        def load(p):
            with Image.open(p) as im:
                return im.convert("RGB")

        a = [ref.at[s, "image"] for s in hum["subject"]]
        b = hum["image"].tolist()
        if benc.kind == "pairs":
            res = benc.scorer.score_pairs([load(x) for x in a], [load(x) for x in b])
            s = np.asarray(getattr(res, "scores", res), dtype=np.float64)
        else:
            enc = benc.embedder.encoder
            uniq = list(dict.fromkeys(a + b))
            e = {}
            for i in range(0, len(uniq), 64):
                chunk = uniq[i:i + 64]
                for u, v in zip(chunk, enc.embed([load(x) for x in chunk]).float().cpu().numpy()):
                    e[u] = v
            s = np.array([float(np.dot(e[x], e[y])) for x, y in zip(a, b)])
        mh = metrics.metric_to_human(s, hum["score"].to_numpy(float), hum["method"].to_numpy(),
                                     cat if (cat != "").all() else None)
        mh["kind"] = "human"
        return mh, s

    return run
