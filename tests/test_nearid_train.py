"""Training loop: exact resumption, loss decreases, MTG rows only reach L_rank, cached == uncached; under
a launch, rank 0 alone clears another run's resume state, before any rank reads the folder."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from nearid_lib import runtime
from nearid_lib.config import get_profile
from nearid_lib.nearid import losses
from nearid_lib.nearid.rows import epoch_rows, steps_per_epoch
from nearid_lib.nearid.train import train_head
from nearid_lib.nearid.train_inputs import TrainFeatures

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(train_world):
    return train_world


@pytest.fixture(scope="module")
def encoder(tiny_lite0):
    return tiny_lite0


def _cfg(**kw):
    base = {"train.max_steps": 4, "train.checkpoint_every": 2, "head.token_dropout": 0.1,
            "train.token_crop": 0.5}
    base.update(kw)
    return get_profile("smoke", overrides=base)


def test_resume_is_exact(world, encoder, tmp_path):
    """Bit-exact under :func:`nearid_lib.runtime.deterministic`, the switch a CUDA run needs for it
    (cuBLAS workspace, no TF32, deterministic kernels; the head trains on the profile's device,
    CUDA when there is one). On CPU it also checks that every op of a step has a deterministic
    kernel (one without raises under the switch)."""
    _, data, cache = world
    cfg = _cfg()
    with runtime.deterministic():
        straight = train_head(cfg, data, encoder, out_dir=tmp_path / "a", progress=False, cache_root=cache,
                              eval_split=None)
        part = train_head(cfg, data, encoder, out_dir=tmp_path / "b", progress=False, cache_root=cache,
                          eval_split=None, stop_after=2)
        assert part.steps == 2 and not (tmp_path / "b" / "head.safetensors").exists()   # "killed"
        resumed = train_head(cfg, data, encoder, out_dir=tmp_path / "b", progress=False, cache_root=cache,
                             eval_split=None)
    assert resumed.resumed_from == 2 and resumed.steps == 4
    sa, sb = straight.head.state_dict(), resumed.head.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert [h["loss"] for h in straight.history] == [h["loss"] for h in resumed.history]
    # a finished run keeps its final head and one finished state.json, no step weights or AdamW moments
    for run in ("a", "b"):
        left = sorted(p.relative_to(tmp_path / run / "resume").as_posix()
                      for p in (tmp_path / run / "resume").rglob("*"))
        assert left == ["step_0000004", "step_0000004/state.json"], left
    again = train_head(cfg, data, encoder, out_dir=tmp_path / "a", progress=False, cache_root=cache, eval_split=None)
    assert again.resumed_from == 4 and torch.equal(again.head.state_dict()["probe"], sa["probe"])
    # and training did change the weights (the comparison above is not vacuous)
    fresh = train_head(_cfg(**{"train.max_steps": 1}), data, encoder, progress=False, cache_root=cache,
                       eval_split=None)
    assert not torch.equal(fresh.head.state_dict()["probe"], sa["probe"])


def test_resume_restores_learnable_loss_parameters(world, encoder, tmp_path):
    """SigLIP's learnable scale and bias are trained with the head: a resumed run continues from
    their saved values (re-initialising them would change every later loss)."""
    _, data, cache = world
    cfg = _cfg(**{"train.loss": "siglip", "train.siglip_learnable": True, "train.lr": 1e-2, "train.max_steps": 5,
                  "train.checkpoint_every": 10})
    kw = dict(progress=False, cache_root=cache, eval_split=None)
    straight = train_head(cfg, data, encoder, out_dir=tmp_path / "a", **kw)
    train_head(cfg, data, encoder, out_dir=tmp_path / "b", stop_after=3, **kw)
    resumed = train_head(cfg, data, encoder, out_dir=tmp_path / "b", **kw)
    assert resumed.resumed_from == 3
    assert [h["loss"] for h in straight.history] == [h["loss"] for h in resumed.history]
    # a final step that is not a checkpoint step (5 with checkpoint_every 10) still finishes the run
    assert sorted(p.name for p in (tmp_path / "b" / "resume").iterdir()) == ["step_0000005"]


def test_loss_decreases(world, encoder):
    _, data, cache = world
    # the whole train split in one batch and no random masking: the objective is the same every step
    cfg = _cfg(**{"train.max_steps": 20, "train.lr": 3e-4, "train.warmup_steps": 4, "train.batch_size": 12,
                  "head.token_dropout": 0.0, "train.token_crop": 0.0, "train.use_mtg": False,
                  "train.mask_p_anchor": 0.0, "train.mask_p_positive": 0.0, "train.mask_p_distractor": 0.0})
    res = train_head(cfg, data, encoder, progress=False, cache_root=cache, eval_split=None)
    loss = [h["loss"] for h in res.history]
    assert np.mean(loss[-4:]) < 0.7 * np.mean(loss[:4]), str([round(x, 2) for x in loss])


def test_epoch_rows_deterministic_and_mtg_rows_are_ordinary(world):
    cfg, data, _ = world
    r0, r0b, r1 = epoch_rows(data, cfg, 0), epoch_rows(data, cfg, 0), epoch_rows(data, cfg, 1)
    assert list(r0.anchor) == list(r0b.anchor) and list(r0.anchor) != list(r1.anchor)
    n_mtg = int((data.mtg.split == "train").sum()) * cfg.train.mtg_repeat
    n_ids = int((data.positives.split == "train").sum())
    is_mtg = np.array([a.startswith("mtg/") for a in r0.anchor])
    assert len(r0) == n_ids + n_mtg and int(is_mtg.sum()) == n_mtg
    assert not r0.rank_only.any()          # MTG rows enter L_disc and L_rank like NearID rows
    # NearID rows: distractors are the anchor view's distractors of the training sources
    for i in np.flatnonzero(~is_mtg)[:5]:
        a = r0.anchor[i]
        j = int(np.flatnonzero(data.positives[["img1", "img2", "img3"]].to_numpy() == a)[0] // 3)
        k = [c for c in (1, 2, 3) if data.positives.iloc[j][f"img{c}"] == a][0]
        want = [data.distractors[s].iloc[j][f"nimg{k}"] for s in data.train_sources]
        assert list(r0.distractors[i][:len(want)]) == want
        assert a not in set(r0.positives[i])
    # MTG rows: one positive (the other background); distractors = own part edit, then the
    # positive's part edit (a second oracle-scored slot), each with its oracle from mtg.csv
    K = r0.distractors.shape[1]
    mtg = data.mtg.set_index("image_1_original")
    for i in np.flatnonzero(is_mtg)[:5]:
        assert "original" in r0.anchor[i] and "original" in r0.positives[i][0]
        assert r0.distractors[i][0] == r0.anchor[i].replace("original", "inpainted")
        assert np.isfinite(r0.oracle[i][0])
        if K >= 2:
            assert r0.distractors[i][1] == r0.positives[i][0].replace("original", "inpainted")
            assert np.isfinite(r0.oracle[i][1]) and (r0.distractors[i][2:] == "").all()
            # the oracles are the two edited images' own scores
            a1 = r0.anchor[i] if r0.anchor[i] in mtg.index else r0.positives[i][0]
            row = mtg.loc[a1]
            own = 1 if r0.anchor[i] == a1 else 2
            assert r0.oracle[i][0] == pytest.approx(float(row[f"oracle_{own}"]))
            assert r0.oracle[i][1] == pytest.approx(float(row[f"oracle_{3 - own}"]))
    assert steps_per_epoch(len(r0), 8) == len(r0) // 8


def test_loss_pushes_the_part_edit_away_from_the_anchor(world):
    """Issue: MTG rows go through the full loss. In the failure mode the loss must fix (the part
    edit closer to the anchor than the anchor's other view, batch negatives far away), the gradient
    of L_NearID (alpha 0.5, and L_disc alone at alpha 0) with respect to the part-edit embedding
    of every MTG row points towards the anchor, so a descent step lowers cos(anchor, part edit).
    Under the old rank-only protocol the L_disc-only gradient was exactly zero."""
    cfg, data, _ = world
    rows = epoch_rows(data, cfg, 0)
    rows = rows.take(np.arange(min(24, len(rows))))
    is_mtg = torch.tensor([a.startswith("mtg/") for a in rows.anchor])
    assert is_mtg.any() and (~is_mtg).any()
    g = torch.Generator().manual_seed(0)
    B, P, K, D = len(rows), rows.positives.shape[1], rows.distractors.shape[1], 64
    pm, dm = torch.from_numpy(rows.positives != ""), torch.from_numpy(rows.distractors != "")
    for alpha in (0.0, 0.5):
        a = torch.nn.functional.normalize(torch.randn(B, D, generator=g), dim=-1)
        p = torch.nn.functional.normalize(a[:, None] + 1.0 * torch.randn(B, P, D, generator=g) / D ** 0.5, dim=-1)
        d = torch.nn.functional.normalize(a[:, None] + 0.3 * torch.randn(B, K, D, generator=g) / D ** 0.5, dim=-1)
        d.requires_grad_(True)
        loss, _ = losses.compute_loss("nearid", a, p, d, pm, dm, cfg, rank_only=torch.from_numpy(rows.rank_only),
                                      alpha=alpha)
        loss.backward()
        edit = d.grad[is_mtg, 0]                                   # the anchor's own part edit
        assert torch.all((edit * a[is_mtg]).sum(-1) > 0), alpha    # -grad points away from the anchor
        stepped = torch.nn.functional.normalize(d.detach() - 0.5 * d.grad, dim=-1)
        before = (d.detach()[is_mtg, 0] * a[is_mtg]).sum(-1)
        after = (stepped[is_mtg, 0] * a[is_mtg]).sum(-1)
        assert torch.all(after < before), alpha
        if alpha == 0.0:     # the old protocol (MTG rows rank-only) gave these rows no L_disc at all
            d_old = d.detach().clone().requires_grad_(True)
            loss_old, _ = losses.compute_loss("nearid", a, p, d_old, pm, dm, cfg, rank_only=is_mtg, alpha=0.0)
            loss_old.backward()
            assert torch.all(d_old.grad[is_mtg] == 0)


def test_cached_and_uncached_tokens_agree(world, encoder):
    _, data, cache = world
    cfg = _cfg(**{"train.augment": False})
    cached = TrainFeatures(encoder, data, cfg, cache_root=cache, progress=False)
    live = TrainFeatures(encoder, data, get_profile("smoke", overrides={"train.use_cache": False,
                                                                    "train.augment": False}),
                     cache_root=cache, progress=False)
    rows = epoch_rows(data, cfg, 0).take(np.arange(6))
    rels, masks = list(rows.anchor), list(rows.anchor_mask)
    fg = np.array([True, False] * 3)
    rng = np.random.default_rng(0)
    a, b = cached.tokens(rels, masks, fg, rng), live.tokens(rels, masks, fg, rng)
    scale = b.abs().max()
    assert torch.allclose(a, b, atol=2e-3 * float(scale), rtol=1e-2)
    assert not torch.allclose(a[0], a[1])       # fg and full differ, and so do images


def test_oracle_ranking_has_pairs_on_mtg_rows(world):
    """The oracle-ranking variants must differ from their bases on real training rows: MTG rows carry
    two oracle-scored distractors, so RankNet has pairs (with one per row the term would vanish)."""
    cfg, data, _ = world
    rows = epoch_rows(data, cfg, 0)
    ro = np.flatnonzero(rows.rank_only)
    assert (np.isfinite(rows.oracle[ro]).sum(1) >= 2).all()
    sel = rows.take(np.concatenate([ro[:4], np.flatnonzero(~rows.rank_only)[:4]]))
    g = torch.Generator().manual_seed(1)
    B, P, K, D = len(sel), sel.positives.shape[1], sel.distractors.shape[1], 8
    a = torch.nn.functional.normalize(torch.randn(B, D, generator=g), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(B, P, D, generator=g), dim=-1)
    d = torch.nn.functional.normalize(torch.randn(B, K, D, generator=g), dim=-1)
    kw = dict(rank_only=torch.from_numpy(sel.rank_only), dist_oracle=torch.from_numpy(sel.oracle).float())
    pm, dm = torch.from_numpy(sel.positives != ""), torch.from_numpy(sel.distractors != "")
    base, _ = losses.compute_loss("infonce", a, p, d, pm, dm, cfg, **kw)
    orac, _ = losses.compute_loss("infonce_oracle", a, p, d, pm, dm, cfg, **kw)
    assert not torch.isclose(base, orac)


def test_random_positive_first_draws_among_valid_views(world):
    from nearid_lib.nearid.rows import random_positive_first

    cfg, data, _ = world
    rows = epoch_rows(data, cfg, 0)
    firsts = {}
    for seed in range(30):
        r = random_positive_first(rows, np.random.default_rng(seed))
        assert (r.positives[:, 0] != "").all() or (rows.positives[:, 0] == "").any()
        for i in range(len(rows)):           # same set of views, the chosen one first
            assert sorted(r.positives[i]) == sorted(rows.positives[i])
            k = list(rows.positives[i]).index(r.positives[i][0])
            assert r.pos_masks[i][0] == rows.pos_masks[i][k]
            firsts.setdefault(i, set()).add(r.positives[i][0])
    two = [i for i in range(len(rows)) if (rows.positives[i] != "").sum() == 2]
    assert two and all(len(firsts[i]) == 2 for i in two)   # both views get drawn


def test_head_from_a_half_precision_siglip_is_float32():
    """Paper: backbone.dtype=float16; the trainable head copied from SigLIP's own MAP head must be
    float32 (Adam on fp16 parameters diverges to NaN; GradScaler refuses fp16 gradients)."""
    from transformers import SiglipVisionConfig
    from transformers.models.siglip.modeling_siglip import SiglipMultiheadAttentionPoolingHead

    from nearid_lib.nearid.train import build_head

    sc = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2)

    class HalfBackbone:
        siglip_head = SiglipMultiheadAttentionPoolingHead(sc).half()

    cfg = get_profile("paper")
    head = build_head(cfg, 16, HalfBackbone())
    assert {p.dtype for p in head.parameters()} == {torch.float32}


_RMTREE = shutil.rmtree


class _Launch:
    """The accelerator of one rank of a 2-process launch, as :func:`train._head` uses it: it records
    the barrier in ``events`` and leaves the head unwrapped (no DDP in one process)."""

    def __init__(self, events: list):
        self.events = events

    def wait_for_everyone(self):
        self.events.append("barrier")

    def prepare(self, *objs):
        return objs

    def unwrap_model(self, model):
        return model


def _launched_head(tmp_path, rank: int, events: list | None, monkeypatch, run: str = "run"):
    """``train._head`` of the smoke profile on rank ``rank`` of 2, its run folder ``tmp_path/<run>``;
    with ``events``, each read of the resume folder and each deletion is recorded there."""
    from types import SimpleNamespace

    from nearid_lib.nearid import checkpoints, train

    if events is not None:       # wrap the originals (a second call replaces, never stacks, the wrappers)
        monkeypatch.setattr(shutil, "rmtree",
                            lambda p, *a, **k: (events.append(("rmtree", rank)), _RMTREE(p, *a, **k)))
        monkeypatch.setattr(train, "latest_state",
                            lambda d: (events.append(("read", rank)), checkpoints.latest_state(d))[1])
    (tmp_path / "data").mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "manifest.json").write_text('{"world": "toy"}')
    s = train._Stream(cfg=_cfg(), backbone=SimpleNamespace(token_dim=16), feats=None, dev=torch.device("cpu"),
                      accel=_Launch(events if events is not None else []), world=2, rank=rank, rows0=None,
                      B=4, spe=2, total=4)
    return train._head(s, _cfg(), SimpleNamespace(root=tmp_path / "data"), tmp_path / run, resume=True)


def _save_state(tmp_path, monkeypatch, key: str | None, step: int = 2) -> None:
    """A resume state at ``step`` in ``tmp_path/run`` of the run ``key`` (None: the smoke run's own)."""
    from nearid_lib.nearid.checkpoints import save_train_state

    h = _launched_head(tmp_path, 0, None, monkeypatch, run="scratch")
    save_train_state(tmp_path / "run" / "resume", step, h.raw, h.opt, h.sched,
                     {"config_key": key or h.key, "history": [], "evals": []}, h.loss_params)


def test_under_a_launch_only_rank_0_clears_a_foreign_resume_state(tmp_path, monkeypatch):
    """The resume folder of a launch's run holds another run's state: rank 0 alone deletes it, before
    the barrier after which every rank reads the folder; another rank never deletes it (it may be
    what rank 0 reads) and, finding a foreign state there, stops instead of starting apart."""
    _save_state(tmp_path, monkeypatch, key="another-run")
    events: list = []
    with pytest.raises(RuntimeError, match="must train the same configuration"):
        _launched_head(tmp_path, 1, events, monkeypatch)     # rank 1 first: rank 0 has not cleared yet
    assert events == ["barrier", ("read", 1)]
    assert (tmp_path / "run" / "resume").is_dir()               # rank 1 deleted nothing
    events.clear()
    h0 = _launched_head(tmp_path, 0, events, monkeypatch)
    assert events == [("read", 0), ("rmtree", 0), "barrier", ("read", 0)] and h0.start == 0
    assert not (tmp_path / "run" / "resume").exists()
    events.clear()
    h1 = _launched_head(tmp_path, 1, events, monkeypatch)
    assert events == ["barrier", ("read", 1)] and h1.start == 0


def test_under_a_launch_every_rank_resumes_its_runs_state(tmp_path, monkeypatch):
    """A state of the run itself is resumed by every rank, rank 0 deleting nothing."""
    _save_state(tmp_path, monkeypatch, key=None, step=2)
    for rank in (1, 0):
        events: list = []
        h = _launched_head(tmp_path, rank, events, monkeypatch)
        assert h.start == 2 and not any(e[0] == "rmtree" for e in events if isinstance(e, tuple))
        assert events[-2:] == ["barrier", ("read", rank)]
