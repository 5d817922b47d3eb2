"""What notebook 02 reports about generated sources: the A100 projection (a hand-computed case),
the pixel check of a regenerated world source and the files of its example figure (toy roots)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib.generate.items import GenItem, example_paths, item_relpath
from nearid_lib.generate.plan import NEARID_VIEWS, projected_source_costs
from nearid_lib.data.world_sources import world_pixel_check
from nearid_lib.generate.specs import NEARID_SOURCES


def test_projection_by_hand():
    spd = {"sdxl": 0.1, "flux_fill": 0.4, "flux_canny": 0.45, "qwen_controlnet": 0.9, "powerpaint": 0.05}
    t = projected_source_costs(spd, n_views=3600, n_gpus=4).set_index("source")
    assert list(t.index) == list(NEARID_SOURCES)
    assert list(t.columns) == ["backend", "device", "steps", "resolution", "s_per_step", "items_per_s",
                               "a100_hours_per_source", "a100_hours_on_4_gpus"]
    # Flux: FLUX Fill (native 1024, 50 steps) at 512 px: 0.4 s/step x (512/1024)^2 = 0.1 s/step, 5 s a view
    flux = t.loc["Flux"]
    assert (flux.backend, flux.steps, flux.resolution) == ("flux_fill", 50, 512)
    assert flux.s_per_step == pytest.approx(0.1) and flux.items_per_s == pytest.approx(0.2)
    assert flux.a100_hours_per_source == pytest.approx(5.0) and flux.a100_hours_on_4_gpus == pytest.approx(1.25)
    # Qwen at its native 1328 px: 8 steps x 0.9 s = 7.2 s a view, no scaling
    qwen = t.loc["Qwen_1328"]
    assert qwen.resolution == 1328 and qwen.a100_hours_per_source == pytest.approx(7.2)
    # the default: the paper's 45,215 views, 8 GPUs
    d = projected_source_costs(spd).set_index("source")
    assert NEARID_VIEWS == 45_215
    assert d.loc["Flux", "a100_hours_per_source"] == pytest.approx(45_215 * 5 / 3600)
    assert d.loc["Flux", "a100_hours_on_8_gpus"] == pytest.approx(45_215 * 5 / 3600 / 8)
    with pytest.raises(KeyError):
        projected_source_costs({"sdxl": 0.1})           # a backend without a stated rate


def _png(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(path)


def _csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=["id", "split", "nimg1", "nimg2", "nimg3"]).to_csv(path, index=False)


def test_world_pixel_check_counts_views_both_have(tmp_path):
    world, regen = tmp_path / "world", tmp_path / "regen"
    for name, v in (("a1", 10), ("a2", 20), ("b1", 30)):
        _png(world / "w" / f"{name}.png", v)
    _png(regen / "r" / "a1.png", 10)          # identical
    _png(regen / "r" / "a2.png", 21)          # one grey level off
    _png(regen / "r" / "b2.png", 40)          # the world rejected this view: not compared
    _csv(world / "distractors" / "S.csv", [["a", "test", "w/a1.png", "w/a2.png", ""],
                                             ["b", "test", "w/b1.png", "", ""]])
    table = pd.DataFrame([["a", "test", "r/a1.png", "r/a2.png", ""], ["b", "test", "", "r/b2.png", ""]],
                         columns=["id", "split", "nimg1", "nimg2", "nimg3"])
    # compared: a/1 (same), a/2 (differs); b/1 rejected by the regeneration, b/2 by the world
    assert world_pixel_check(table, "S", regen, world) == {"source": "S", "n_compared": 2, "n_pixel_identical": 1}


def test_example_paths_follow_the_merged_csv_else_the_runner_layout(tmp_path):
    root, raw = tmp_path / "data", tmp_path / "raw"
    items = [GenItem("a/1", "a", "test", 1, "pos/a1.png", "m/a1.png", ""),
             GenItem("b/2", "b", "test", 2, "pos/b2.png", "m/b2.png", "")]
    _png(root / "pos" / "a1.png", 1)                                   # b's positive file is missing
    _png(root / "src" / "a1.png", 2)
    _csv(root / "distractors" / "S.csv", [["a", "test", "src/a1.png", "", ""], ["b", "test", "", "", ""]])
    _png(raw / item_relpath("T", items[1]), 3)                         # unmerged: only b/2 was written
    assert item_relpath("T", items[1]) == "distractors/T/b_2.png"
    got = example_paths(items, [(root, None), (root, "S"), (raw, "T")])
    assert got == [[root / "pos" / "a1.png", root / "src" / "a1.png", None],
                   [None, None, raw / "distractors" / "T" / "b_2.png"]]
