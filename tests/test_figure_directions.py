"""Figures that say which way is better (issue 57, item 5): ID-Sim Figure 6's bars on one y-scale,
identity "higher is better" and the context factors "lower is better", 0 marked as chance; FPR
Figure 3 with each bar's chance mAP and which way is better."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from nearid_lib.fpr.figures import plot_main
from nearid_lib.idsim.sensitivity import plot_sensitivity_bars

matplotlib.use("Agg")


def test_sensitivity_bars_share_one_scale_and_say_which_way_is_better():
    rows = []
    for enc, scale in (("frozen", 1.0), ("idsim", 3.0)):
        for f, v in (("identity", 0.6), ("background", 0.05), ("viewpoint", 0.02), ("lighting", 0.01)):
            m = v * scale
            rows.append({"encoder": enc, "factor": f, "mean": m, "low": m - 0.01, "high": m + 0.01})
    fig = plot_sensitivity_bars(pd.DataFrame(rows), {"frozen": "frozen", "idsim": "ID-Sim"})
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["identity\n(higher is better)", "background\n(lower is better)",
                                               "viewpoint\n(lower is better)", "lighting\n(lower is better)"]
    lims = {ax.get_ylim() for ax in axes}
    assert len(lims) == 1 and lims.pop()[1] >= 1.8 - 1e-9          # the small factors on the identity's scale
    for ax in axes:
        zero = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert len(zero) == 1 and np.allclose(zero[0].get_ydata(), 0)


def test_fpr_main_draws_each_bars_chance_and_says_higher_is_better():
    main = pd.DataFrame({"encoder": ["lite0"] * 3, "method": ["copy", "drift_low", "drift_high"],
                         "drift": [0.0, 0.3, 0.9], "sim": [0.95, 0.9, 0.8], "map": [0.9, 0.6, 0.3],
                         "map_chance": [0.31, 0.31, 0.29]})
    fig = plot_main(main, "smoke")
    top, bottom = fig.axes
    assert top.get_title() == "lite0: pairwise similarity, higher = closer"
    assert bottom.get_title() == "lite0: gallery mAP, higher is better"
    ticks = [c for c in bottom.collections if isinstance(c, LineCollection)]
    assert len(ticks) == 1
    segs = ticks[0].get_segments()
    assert [s[0][1] for s in segs] == pytest.approx([0.31, 0.31, 0.29])
    assert [(s[0][0] + s[1][0]) / 2 for s in segs] == pytest.approx([0, 1, 2])   # one tick over each bar
    assert [t.get_text() for t in bottom.get_legend().get_texts()] == ["chance (random ranking)"]
    assert "a good metric falls as t rises" in fig._suptitle.get_text()
    # a table without the column (an older run) still draws, without the ticks
    fig = plot_main(main.drop(columns="map_chance"), "smoke")
    assert not [c for c in fig.axes[1].collections if isinstance(c, LineCollection)]
