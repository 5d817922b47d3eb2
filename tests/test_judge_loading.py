"""Large judges load when they have work and leave the GPUs before the next arrives; DreamBench++'s
rated generations are judged once each, whatever the number of rater groups; an out-of-memory in
the judge step is that step's failure, named with its placement, not a crash of a notebook."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from nearid_lib.nearid import dbpp as D
from nearid_lib.judge import LazyJudge


class CountingJudge:
    name, batch_size = "counting", 8

    def __init__(self):
        self.pairs = []

    def score_pairs(self, a, b):
        self.pairs += list(zip([im.size for im in a], [im.size for im in b]))
        return np.arange(len(a), dtype=float)


def test_a_lazy_judge_loads_at_its_first_pair_and_release_frees_it():
    loads = []

    def load():
        loads.append(1)
        return CountingJudge()

    j = LazyJudge(SimpleNamespace(name="shell", fingerprint=lambda: {"name": "shell"}), load)
    assert not j.loaded and j.name == "shell" and loads == []          # built, named, fingerprinted: no weights
    im = Image.new("RGB", (4, 4))
    j.score_pairs([im], [im])
    assert j.loaded and loads == [1] and j.name == "counting"
    j.score_pairs([im], [im])
    assert loads == [1]                                                 # loaded once
    j.release()
    assert not j.loaded and j.name == "shell"
    j.score_pairs([im], [im])
    assert loads == [1, 1]


def test_dbpp_generations_are_judged_once_each_whatever_the_rater_groups(tmp_path):
    paths = []
    for i, size in enumerate([(5, 5), (6, 6), (7, 7)]):
        p = tmp_path / f"im{i}.png"
        Image.new("RGB", size).save(p)
        paths.append(str(p))
    ref, g1, g2 = paths
    judge = CountingJudge()
    benc = SimpleNamespace(kind="pairs", scorer=judge, answers_dir=None, workers=None)
    # two rater groups rate the same two generations: four rows, two distinct pairs
    s = D._pair_scores(benc, [ref, ref, ref, ref], [g1, g2, g1, g2])
    assert judge.pairs == [((5, 5), (6, 6)), ((5, 5), (7, 7))]
    assert s.tolist() == [0.0, 1.0, 0.0, 1.0]


def test_the_judge_step_names_an_out_of_memory_with_its_placement(monkeypatch, capsys):
    import torch

    from nearid_lib.nearid import judge_step as JS

    def oom(cfg, data, benc):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    benc = SimpleNamespace(model="tiny", answers_dir="/answers/here", scorer=None)
    monkeypatch.setattr(JS, "judge_encoders", lambda cfg, rank, gpu_bytes: ([benc], {}))
    monkeypatch.setattr(JS, "judge_bench", oom)
    monkeypatch.setattr(JS, "load_nearid", lambda root: None)
    monkeypatch.setattr(JS, "judge_models", lambda cfg: [])
    assert JS.main(["--profile", "smoke"]) == 3
    out = capsys.readouterr().out
    assert "ran out of GPU memory on rank 0" in out and "/answers/here" in out and "eval.vlm_batch_size" in out
