"""The cross-paper table's figure (``nearid_lib.cross_paper``; the table itself runs in the smoke
notebook 12 through the protocols' own code)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nearid_lib.cross_paper import CROSS_COLUMNS, plot_cross_paper


def test_heatmap_colours_by_rank_respecting_lower_is_better():
    t = pd.DataFrame({"row": ["a", "b", "c"], "nearid_ssr": [10.0, 50.0, 30.0],
                      "idsim_background": [0.1, 0.3, 0.2], "fpr_map": [np.nan, 0.5, 0.4]})
    fig = plot_cross_paper(t)
    score = fig.axes[0].images[0].get_array()
    assert list(score[:, 0]) == [0.0, 1.0, 0.5]                  # higher SSR is better
    assert np.allclose(score[:, 1], [1.0, 0.0, 0.5], atol=1e-12)   # lower background sensitivity is better (1 - x: rounding)
    assert np.ma.is_masked(score[0, 2]) and list(score[1:, 2]) == [1.0, 0.0]
    labels = [x.get_text() for x in fig.axes[0].get_xticklabels()]
    assert labels[1].startswith("ID-Sim") and "lower better" in labels[1]
    assert {c for c, *_ in CROSS_COLUMNS} >= {"nearid_ssr", "idsim_identity", "fpr_map"}
