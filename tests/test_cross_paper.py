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


def test_seed_note_names_the_seeds_each_trained_row_averages(tmp_path, monkeypatch):
    """The trained rows average every training seed, as the claims do; the note says which (read from
    the checkpoints' own seed lists)."""
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
    assert "the NearID head: seeds 0, 1, 2" in note and "ID-Sim: seeds 0, 1, 2" in note
    assert note.startswith("Trained rows are the mean over their training seeds")


def test_owner_disagreements_name_a_trained_cell_that_differs_from_its_owner(tmp_path):
    """Notebook 12's trained rows must equal what the notebooks that own each benchmark computed (the
    committed mini run gave ID-Sim's identity sensitivity 0.315 in 12 and 0.615 in 10)."""
    import pandas as pd

    from nearid_lib.cross_paper import OWNER_ATOL, owner_disagreements

    assert owner_disagreements(tmp_path) == []                       # no table 12: nothing to compare
    pd.DataFrame([{"key": "idsim", "idsim_identity": 0.6154, "idsim_background": 0.0564},
                  {"key": "nearid", "nearid_ssr": 84.48, "nearid_pa": 94.13, "idsim_identity": 0.7016}]
                 ).to_csv(tmp_path / "12_cross_paper.csv", index=False)
    pd.DataFrame([{"model": "ID-Sim", "encoder": "idsim", "factor": "identity", "estimate": 0.6154 + 1e-5},
                  {"model": "ID-Sim", "encoder": "idsim", "factor": "background", "estimate": 0.0564},
                  {"model": "NearID head", "encoder": "nearid", "factor": "identity", "estimate": 0.7016},
                  {"model": "DINOv3", "encoder": "frozen", "factor": "identity", "estimate": 0.277}]
                 ).to_csv(tmp_path / "10_sensitivity.csv", index=False)
    pd.DataFrame([{"row": "NearID (Ours)", "nearid_ssr": 84.48, "nearid_pa": 94.13}]).to_csv(
        tmp_path / "04_table1_main.csv", index=False)
    assert owner_disagreements(tmp_path) == []
    pd.DataFrame([{"key": "idsim", "idsim_identity": 0.3147, "idsim_background": 0.0564},
                  {"key": "nearid", "nearid_ssr": 85.95, "nearid_pa": 94.13, "idsim_identity": 0.7016}]
                 ).to_csv(tmp_path / "12_cross_paper.csv", index=False)
    probs = owner_disagreements(tmp_path)
    assert len(probs) == 2
    assert "idsim.idsim_identity = 0.3147, 10_sensitivity ID-Sim/identity = 0.61541" in probs[0]
    assert "nearid.nearid_ssr = 85.95, 04_table1_main NearID (Ours).nearid_ssr = 84.48" in probs[1]
    assert OWNER_ATOL["sensitivity"] < 0.3 - 0.0001
