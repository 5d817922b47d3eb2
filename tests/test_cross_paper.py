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


def test_heatmap_has_a_colour_bar_and_the_seed_note_under_it():
    t = pd.DataFrame({"row": ["a", "b"], "nearid_ssr": [10.0, 50.0]})
    fig = plot_cross_paper(t, "x", footnote="Trained rows are one training seed")
    assert len(fig.axes) == 2                                          # the heatmap and its colour bar
    assert [x.get_text() for x in fig.axes[1].get_yticklabels()] == ["worst", "", "best"]
    assert "place in its column" in fig.axes[1].get_ylabel()
    assert "Trained rows are one training seed" in {x.get_text() for x in fig.texts}
    assert not plot_cross_paper(t).texts


def test_seed_note_names_the_published_seed_of_each_trained_row(tmp_path, monkeypatch):
    """Issue 53: the trained rows are the published checkpoint's seed while the claims average every
    seed; the note says which (read from the checkpoints' own seed lists)."""
    import json
    from types import SimpleNamespace

    from nearid_lib.cross_paper import seed_note
    from nearid_lib.paths import checkpoint_dir

    monkeypatch.setenv("NEARID_OUT", str(tmp_path))
    cfg = SimpleNamespace(name="mini")
    assert seed_note(cfg) == ""
    ck = checkpoint_dir("mini")
    (ck / "nearid" / "seeds" / "seed1").mkdir(parents=True)
    (ck / "nearid" / "seeds" / "seed2").mkdir(parents=True)
    (ck / "nearid" / "seeds.json").write_text(json.dumps({"seed": 0, "seeds": [0, 1, 2]}))
    (ck / "idsim").mkdir()
    (ck / "idsim" / "idsim.json").write_text(json.dumps({"seed": 0, "seeds": [0, 1, 2]}))
    note = seed_note(cfg)
    assert "the NearID head is seed 0 of 3 (0, 1, 2)" in note and "ID-Sim is seed 0 of 3 (0, 1, 2)" in note
    assert "The claims average every seed" in note
