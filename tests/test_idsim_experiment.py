"""Notebook 09's stages (nearid_lib.idsim.experiment) in the ``released`` source: every table that
needs ID-Sim trained here is skipped with the reason of ``world_only_tables``, nothing is trained
and nothing is shown, so the notebook's cells run unchanged in every profile."""
from __future__ import annotations

import json

import pytest

from nearid_lib.idsim.ablations import OUTPUTS, PLACEMENT_OUTPUT
from nearid_lib.idsim.experiment import (choose_lora_placement, persam_segmentation, train_models, training_ablations,
                                         trains_here)
from nearid_lib.idsim.released import world_only_tables
from nearid_lib.run import start_run

pytestmark = pytest.mark.usefixtures("clean_hub")


@pytest.fixture
def released_run(monkeypatch, tmp_path):
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    monkeypatch.setenv("NEARID_CACHE", str(tmp_path / "cache"))
    return start_run("smoke", 0, "09_x", overrides={"idsim.source": "released", "idsim.adapt_stages_choices": (1, 2),
                                                     "runtime.threads": 1})


def _skipped(run, name: str) -> str:
    return json.loads((run.tables / f"{name}.skipped.json").read_text())["reason"]


def test_the_released_source_skips_every_table_that_needs_training_with_its_reason(released_run):
    run, cfg = released_run, released_run.cfg
    assert not trains_here(cfg)
    placement = choose_lora_placement(run, cfg, None)
    assert placement.cfg is cfg and placement.trained is None and not placement.tables
    training = train_models(run, cfg, None, placement)
    assert training.runs == [] and training.model is None and not training.figures
    assert not persam_segmentation(run, cfg, None, training, None, None).tables
    ablations = training_ablations(run, cfg, None, placement)
    assert ablations.by_table == {} and not ablations.tables
    why = world_only_tables(cfg)
    names = [PLACEMENT_OUTPUT, "09_idsim_persam", *(OUTPUTS[k] for k in cfg.idsim.ablation_tables)]
    assert sorted(names) == sorted(why)
    for name in names:
        assert _skipped(run, name) == why[name]
    assert not list(run.figures.glob("*.png"))
