"""FPR per-dataset tables (paper Tables 5-13): dataset mAP as the mean of per-species mAPs beside
the all-queries mean, role assignment, the paper's table names."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nearid_lib.fpr.tables import (dataset_scores, generated_table, paper_dataset_key, paper_table_name,
                                   role_encoders, split_by_dataset)


def _pq():
    # dataset "cub_sparrow": species s1 has 3 queries (AP 1, 1, 0.4), s2 has 1 query (AP 0.2)
    rows = []
    for enc, shift in (("clip-vit-b32", 0.0), ("bioclip2", 0.1)):
        for sp, aps in (("s1", [1.0, 1.0, 0.4]), ("s2", [0.2])):
            for a in aps:
                rows.append({"dataset": "cub_sparrow", "species": sp, "method": "m", "encoder": enc,
                             "ap": min(1.0, a + shift), "sim": 0.5 + shift})
    return pd.DataFrame(rows)


def test_dataset_scores_species_mean_vs_all_queries():
    s = dataset_scores(_pq()).set_index("encoder")
    # per-species mAPs 0.8 and 0.2 -> 0.5; all four queries -> 2.6 / 4 = 0.65
    assert s.at["clip-vit-b32", "map"] == pytest.approx(0.5)
    assert s.at["clip-vit-b32", "map_all"] == pytest.approx(0.65)
    assert s.at["clip-vit-b32", "n_species"] == 2 and s.at["clip-vit-b32", "n_queries"] == 4
    # bioclip2: s1 (1, 1, 0.5) -> 5/6, s2 0.3 -> (5/6 + 0.3) / 2
    assert s.at["bioclip2", "map"] == pytest.approx((5 / 6 + 0.3) / 2)
    with pytest.raises(KeyError, match="species"):
        dataset_scores(_pq().drop(columns="species"))


def test_generated_table_roles_and_names():
    t = generated_table(_pq())
    assert len(t) == 1
    r = t.iloc[0]
    assert r.specialized_model == "bioclip2"
    assert r.clip_i_map == pytest.approx(0.5) and r.clip_i_map_all == pytest.approx(0.65)
    assert r.spec_sim == pytest.approx(0.6) and np.isnan(r.dino_map)
    assert "clip_i=clip-vit-b32" in r.ours_label and "spec=bioclip2" in r.ours_label
    assert set(split_by_dataset(t)) == {"11_fpr_cub_sparrow"}


def test_role_encoders_and_dataset_keys():
    assert role_encoders("reid_zebra", ["clip-vit-b32", "dinov2-base", "miewid", "nearid"]) == \
        {"clip_i": "clip-vit-b32", "dino": "dinov2-base", "spec": "miewid"}
    # mini: the frozen EfficientNet fills clip_i, no DINO, the NearID head is the specialist
    assert role_encoders("mini/bird", ["efficientnet-lite0", "nearid"]) == \
        {"clip_i": "efficientnet-lite0", "dino": None, "spec": "nearid"}
    assert role_encoders("cars", ["clip-vit-b32"])["spec"] is None
    assert paper_dataset_key("reid_leopard") == "leopard" and paper_dataset_key("cars") == "stanford_cars"
    assert paper_table_name("cub_wren") == "11_fpr_cub_wren"
    assert paper_table_name("Stanford-Cars") == "11_fpr_stanford_cars"
    assert paper_table_name("mini/bird") is None


def test_every_paper_table_name_is_a_spec_output():
    import json
    from nearid_lib.fpr.tables import PAPER_DATASETS
    from nearid_lib.report import paper_values_dir

    for key, num in PAPER_DATASETS.items():
        meta = json.loads((paper_values_dir() / f"fpr_table{num}_{key}.meta.json").read_text())
        assert meta["ours"] == f"tables/{paper_table_name(key)}.csv"


def test_dataset_view_mini_species_and_whole_world():
    from nearid_lib.fpr.tables import dataset_view

    pq = _pq().drop(columns="dataset")
    v = dataset_view(pq, "NearID-mini")
    assert len(v) == 2 * len(pq)
    t = generated_table(v).set_index("dataset")
    assert set(t.index) == {"mini/s1", "mini/s2", "NearID-mini"}
    assert t.at["mini/s1", "clip_i_map"] == pytest.approx(0.8)        # one species: both means agree
    assert t.at["mini/s1", "clip_i_map_all"] == pytest.approx(0.8)
    assert t.at["NearID-mini", "clip_i_map"] == pytest.approx(0.5)
    assert t.at["NearID-mini", "clip_i_map_all"] == pytest.approx(0.65)
    assert split_by_dataset(t.reset_index()) == {}                      # no paper dataset in mini
    assert dataset_view(_pq(), "x") is not None and len(dataset_view(_pq(), "x")) == len(_pq())
