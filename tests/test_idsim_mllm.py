"""ID-Sim's MLLM judges (Table 2a): the 0-1 similarity field is read like NearID's 0-10 score,
metrics are computed on covered pairs only, the cost cap keeps every rating level, and the real
generation path runs on a random-init tiny Qwen3-VL."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib import metrics as M
from nearid_lib.idsim.mllm import IDSIM_JUDGE_PROMPT, CallableJudge, idsim_judge, judge_graded, mllm_table
from nearid_lib.judge import parse_judge_answer


@pytest.mark.parametrize("answer,status,sim", [
    ('{"same_instance": 1, "confidence": 0.8, "similarity": 0.75}', "ok", 0.75),
    ('```json\n{"same_instance": 0, "similarity": "0.2"}\n```', "ok", 0.2),
    ('{"same_instance": 1, "similarity": 0.9, "conf', "recovered", 0.9),
    ('{"same_instance": 1, "similarity": 7}', "out_of_range", None),
    ('{"same_instance": 1, "confidence": 0.9}', "no_score", None),
    ('{"score": 7}', "no_score", None),              # NearID's field is not ID-Sim's
])
def test_similarity_field(answer, status, sim):
    p = parse_judge_answer(answer, key="similarity", hi=1.0)
    assert p.status == status
    if sim is None:
        assert np.isnan(p.similarity)
    else:
        assert p.similarity == pytest.approx(sim)


def test_nearid_default_unchanged():
    assert parse_judge_answer('{"score": 7}').similarity == pytest.approx(0.7)
    assert parse_judge_answer('{"similarity": 0.7}').status == "no_score"


def _graded(n=12, seed=0):
    rng = np.random.default_rng(seed)
    c = np.round(rng.random(n), 2)
    return pd.DataFrame({"img1": ["a"] * n, "img2": [f"b{i}" for i in range(n)], "c": c, "rating": c})


def test_metrics_on_covered_pairs_only():
    g = _graded()
    sims = np.linspace(0.0, 1.0, len(g))
    answers = {f"b{i}": ('{"similarity": %.4f}' % s if i % 3 else "no idea") for i, s in enumerate(sims)}
    judge = CallableJudge(lambda a, b: [answers[x] for x in b])
    res, per = judge_graded(judge, g, lambda k: k)
    keep = [i % 3 != 0 for i in range(len(g))]
    assert res["coverage"] == pytest.approx(np.mean(keep))
    assert res["subjects2k_ap"] == pytest.approx(M.subjects2k_ap(sims[keep], g.c.to_numpy()[keep]))
    assert res["dreambench_spearman"] == pytest.approx(
        M.rank_correlations(sims[keep], g.rating.to_numpy()[keep])["spearman"])
    assert per.status.tolist().count("unparseable") == len(g) - sum(keep)


def test_cap_spans_rating_levels():
    g = pd.DataFrame({"img1": ["a"] * 9, "img2": [f"b{i}" for i in range(9)],
                      "c": [0.0] * 6 + [0.5, 1.0, 1.0], "rating": [0.0] * 6 + [0.5, 1.0, 1.0]})
    judge = CallableJudge(lambda a, b: ['{"similarity": 0.5}'] * len(a))
    _, per = judge_graded(judge, g, lambda k: k, max_pairs=3)
    assert sorted(per.rating) == [0.0, 0.5, 1.0]


def test_callable_judge_checks_answer_count():
    judge = CallableJudge(lambda a, b: ["{}"], name="api")
    with pytest.raises(ValueError, match="'api': 1 answers for 2 pairs"):
        judge.score_pairs(["x", "y"], ["x", "y"])


def test_tiny_qwen3vl_judge_runs_with_the_idsim_prompt():
    judge = idsim_judge("tiny")
    assert judge.prompt == IDSIM_JUDGE_PROMPT and judge.answer_key == "similarity"
    rng = np.random.default_rng(0)
    imgs = {k: Image.fromarray((rng.random((40, 40, 3)) * 255).astype("uint8")) for k in "abc"}
    g = pd.DataFrame({"img1": ["a", "a"], "img2": ["b", "c"], "c": [1.0, 0.0], "rating": [1.0, 0.0]})
    res, per = judge_graded(judge, g, imgs.__getitem__)
    assert res["n_pairs"] == 2 and len(per.answer) == 2
    assert set(per.status) <= {"ok", "recovered", "truncated", "no_score", "bad_score", "out_of_range",
                               "unparseable", "empty"}


def test_mllm_table_columns():
    t = mllm_table({"idsim": {"subjects2k_ap": 0.4, "dreambench_spearman": 0.6},
                    "judge": {"subjects2k_ap": np.nan, "dreambench_spearman": np.nan, "coverage": 0.0,
                              "n_pairs": 4}},
                   {"idsim": ("Ours (ViT-L)", "ID-Sim"), "judge": ("", "tiny judge")}, "smoke")
    assert t.row.tolist() == ["Ours (ViT-L)", ""] and t.coverage.tolist() == [1.0, 0.0]
