"""The loss registry: a new objective is one function and one ``register_loss`` call, after which
``compute_loss``, the hyper-parameters, the loss-ablation rows of Table 3 (notebook 05) and a sweep
that trains them know it; bad registrations and unknown names fail loudly."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from nearid_lib.runtime.code_closure import code_closure
from nearid_lib.config import EvalConfig, get_profile
from nearid_lib.config.values import ConfigValueError
from nearid_lib.nearid import checkpoints as ck
from nearid_lib.nearid import sweep as sw
from nearid_lib.nearid.ablations import loss_rows
from nearid_lib.nearid.losses import (LOSS_INFO, LOSSES, REGISTRY, LossBatch, compute_loss, loss_hparams,
                                      make_loss_parameters, register_loss)
from nearid_lib.report import paper_values_dir

torch.set_num_threads(1)
BUILT_IN = tuple(LOSSES)                 # before any test registers one
CALLS: list[int] = []


# --------------------------------------------------------------------------- a new loss, in one function
def cosine_margin_terms(b: LossBatch) -> dict[str, torch.Tensor]:
    """A toy objective: L_disc = mean over valid (anchor, positive) of 1 - cos; L_rank = mean over valid
    (anchor, distractor) of [cos - toy_margin]_+ (rank_only rows: ranking only)."""
    CALLS.append(1)
    cos_p = b.logits.lp * b.temperature                                   # [B,P]
    cos_r = b.logits.lr * b.temperature                                   # [B,K]
    pm = b.pos_mask & ~b.rank_only.unsqueeze(1)
    zero = torch.zeros((), dtype=cos_p.dtype)
    disc = torch.where(pm, 1.0 - cos_p, zero).sum() / pm.sum().clamp_min(1)
    rank = torch.where(b.dist_mask, F.relu(cos_r - float(b.hp["toy_margin"])), zero).sum() / \
        b.dist_mask.sum().clamp_min(1)
    return {"disc": disc, "rank": rank}


@pytest.fixture
def toy():
    spec = register_loss("cosine_margin", cosine_margin_terms, description="1 - cos + alpha * [cos_r - m]_+",
                         r_usage="S", row_id="cosine_margin_row", hparams={"toy_margin": 0.2})
    yield spec
    REGISTRY.pop(spec.name)


def _batch(seed=0, B=4, P=3, K=2, D=6):
    g = torch.Generator().manual_seed(seed)
    a = F.normalize(torch.randn(B, D, generator=g, dtype=torch.float64), dim=-1)
    pos = F.normalize(torch.randn(B, P, D, generator=g, dtype=torch.float64), dim=-1)
    dis = F.normalize(torch.randn(B, K, D, generator=g, dtype=torch.float64), dim=-1)
    pm = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    dm = torch.tensor([[1, 0], [1, 1], [0, 1], [1, 1]], dtype=torch.bool)
    ro = torch.tensor([False, False, True, False])
    return a, pos, dis, pm, dm, ro


def _reference(a, pos, dis, pm, dm, ro, alpha, margin):
    """The toy loss by plain loops over python floats."""
    def cos(u, v):
        return sum(x * y for x, y in zip(u, v))
    a, pos, dis = a.tolist(), pos.tolist(), dis.tolist()
    disc = [1 - cos(a[i], pos[i][p]) for i in range(len(a)) for p in range(len(pos[i]))
            if pm[i, p] and not ro[i]]
    rank = [max(cos(a[i], dis[i][k]) - margin, 0.0) for i in range(len(a)) for k in range(len(dis[i])) if dm[i, k]]
    return sum(disc) / len(disc) + alpha * sum(rank) / len(rank)


# --------------------------------------------------------------------------- tests
def test_a_registered_loss_is_computed_by_name(toy):
    a, pos, dis, pm, dm, ro = _batch()
    loss, parts = compute_loss("cosine_margin", a, pos, dis, pm, dm, None, rank_only=ro)
    # float64, sums in another order than the loops: agreement to rounding (1e-12 relative)
    assert loss.item() == pytest.approx(_reference(a, pos, dis, pm, dm, ro, 0.5, 0.2), rel=1e-12)
    assert set(parts) == {"disc", "rank"}
    loss2, _ = compute_loss("cosine_margin", a, pos, dis, pm, dm, None, rank_only=ro, alpha=2.0, toy_margin=-0.5)
    assert loss2.item() == pytest.approx(_reference(a, pos, dis, pm, dm, ro, 2.0, -0.5), rel=1e-12)
    assert loss2.item() != pytest.approx(loss.item())
    # its hyper-parameter, its metadata and the live name lists
    assert loss_hparams(None)["toy_margin"] == 0.2
    assert "cosine_margin" in LOSSES and LOSS_INFO["cosine_margin"] == ("1 - cos + alpha * [cos_r - m]_+", "S")
    assert len(make_loss_parameters("cosine_margin", get_profile("smoke"))) == 0


def test_a_registered_loss_is_a_row_of_the_loss_ablation(toy):
    default = get_profile("smoke")
    cfg = get_profile("smoke", **{"eval.ablation_losses": (*default.eval.ablation_losses, "cosine_margin")})
    rows = loss_rows(cfg)
    assert rows[:-1] == loss_rows(default)            # the paper's rows are untouched
    row = rows[-1]
    assert (row.key, row.label, dict(row.overrides), row.paper_id) == (
        "loss.cosine_margin", "cosine_margin", {"train.loss": "cosine_margin"}, "cosine_margin_row")


def test_a_registered_loss_trains_and_scores_through_the_sweep(toy, train_world, tiny_lite0, tmp_path):
    """The row of the new loss through notebook 05's path (``loss_rows`` -> ``run_rows``): trained with
    the registered terms (they are called), scored, and summarised under its table row id."""
    _, data, cache = train_world
    cfg = get_profile("smoke", **{"eval.ablation_losses": ("cosine_margin",), "train.max_steps": 2})
    rows = loss_rows(cfg)
    CALLS.clear()
    sweep = sw.run_rows(cfg, data, tiny_lite0, rows, seeds=[0], progress=False, workers=1,
                        run_root=tmp_path / "runs", cache_root=cache)
    assert len(CALLS) == 2                             # one call per training step
    run = sweep.runs["loss.cosine_margin"][0]
    assert run.steps == 2 and math.isfinite(run.final_loss)
    summary = sweep.summary()
    assert summary["row_id"].tolist() == ["cosine_margin_row"]
    assert 0.0 <= summary["nearid_ssr"].iloc[0] <= 1.0


def test_the_default_ablation_losses_are_the_built_in_table3_rows():
    """eval.ablation_losses stays a literal in the config layer (below the paper packages); it names
    exactly the built-in objectives, in the registry's order, and each row id is one of the paper's
    Table 3 rows."""
    assert EvalConfig().ablation_losses == BUILT_IN
    paper = set(pd.read_csv(paper_values_dir() / "nearid_table3_loss_ablation.csv")["row_id"])
    assert {REGISTRY[n].row_id for n in BUILT_IN} <= paper
    # Table 4's "R usage" as transcribed ("none": the paper's "---", batch-implicit negatives only)
    t4 = pd.read_csv(paper_values_dir() / "nearid_table4_loss_decomposition.csv").set_index("row_id")["r_usage"]
    assert {REGISTRY[n].row_id: REGISTRY[n].r_usage for n in BUILT_IN} == t4.replace("none", "-").to_dict()
    assert {n for n in BUILT_IN if REGISTRY[n].first_positive} == {
        "infonce", "infonce_rneg", "infonce_oracle", "infonce_rneg_oracle"}


def test_every_built_in_loss_keys_the_training_runs():
    """A registered loss is reached through the registry only; its module must still be part of the
    code that keys a trained run (an edit of it re-trains)."""
    train = set(code_closure(*ck.TRAINING_ROOTS))
    for name in BUILT_IN:
        spec = REGISTRY[name]
        for fn in (spec.terms, spec.parameters):
            fn = getattr(fn, "func", fn)                  # a functools.partial: its function
            if fn is not None:
                mod = fn.__module__.removeprefix("nearid_lib.").replace(".", "/") + ".py"
                assert mod in train, (name, mod)


def test_unknown_names_and_bad_registrations_fail_loudly(toy):
    with pytest.raises(ConfigValueError, match=r"eval.ablation_losses: unknown loss\(es\) 'nearid_cohesoin'; "
                                               r"registered: infonce, "):
        loss_rows(get_profile("smoke", **{"eval.ablation_losses": ("nearid", "nearid_cohesoin")}))
    with pytest.raises(KeyError, match="unknown loss 'nope'"):
        make_loss_parameters("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_loss("nearid", cosine_margin_terms, description="x")
    with pytest.raises(ValueError, match="declares circle_m=0.3, another loss circle_m=0.25"):
        register_loss("other", cosine_margin_terms, description="x", hparams={"circle_m": 0.3})
    with pytest.raises(ValueError, match="shared hyper-parameter 'alpha'"):
        register_loss("other", cosine_margin_terms, description="x", hparams={"alpha": 1.0})
    with pytest.raises(ValueError, match="weighed by 'gamma', not a hyper-parameter"):
        register_loss("other", cosine_margin_terms, description="x", weights=(("disc", None), ("rank", "gamma")))
    with pytest.raises(ValueError, match="must be an identifier"):
        register_loss("my loss", cosine_margin_terms, description="x")
    assert "other" not in REGISTRY and "my loss" not in REGISTRY
    # a loss whose terms do not match its weights is refused at its first call
    register_loss("wrong_terms", lambda b: {"disc": b.anchor.sum()}, description="x")
    try:
        with pytest.raises(ValueError, match=r"returned the terms \['disc'\]; its weights name \['disc', 'rank'\]"):
            compute_loss("wrong_terms", *_batch()[:3])
    finally:
        REGISTRY.pop("wrong_terms")
