"""Bad input at the public edges gets a clear, exact message: compute_loss (non-finite, un-normalised,
mixed dtypes; normalize=True), config overrides (type and range, naming the key), rank_generator's
group_by."""
from __future__ import annotations

import re

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from nearid_lib.config import ConfigError, get_profile
from nearid_lib.fpr import FPRLayoutError, rank_generator
from nearid_lib.nearid.losses import compute_loss


def _batch(B=3, P=2, K=2, D=4, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    a = F.normalize(torch.randn(B, D, generator=g, dtype=dtype), dim=-1)
    p = F.normalize(torch.randn(B, P, D, generator=g, dtype=dtype), dim=-1)
    d = F.normalize(torch.randn(B, K, D, generator=g, dtype=dtype), dim=-1)
    return a, p, d


def _exact(msg: str) -> str:
    return "^" + re.escape(msg) + "$"


def test_loss_rejects_non_finite_valid_slots_only():
    a, p, d = _batch()
    p[1, 0, 2] = float("nan")
    with pytest.raises(ValueError, match=_exact(
            "compute_loss: positives[1, 0] has non-finite values (NaN or inf) in a valid slot; "
            "mask the slot out or fix the embedding")):
        compute_loss("nearid", a, p, d)
    pm = torch.ones(3, 2, dtype=torch.bool)
    pm[1, 0] = False                                         # the same NaN, masked out: accepted
    loss, _ = compute_loss("nearid", a, p, d, pm)
    assert torch.isfinite(loss)


def test_loss_rejects_unnormalised_embeddings_or_normalises_on_request():
    a, p, d = _batch()
    with pytest.raises(ValueError, match=_exact(
            "compute_loss: anchor[0] is not L2-normalised (norm 3); the losses expect unit-norm "
            "embeddings: F.normalize(x, dim=-1) first, or pass normalize=True")):
        compute_loss("nearid", a * 3, p, d)
    want, _ = compute_loss("nearid", a, p, d)
    got, _ = compute_loss("nearid", a * 3, p * 0.5, d * 7, normalize=True)
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    # normalize=True keeps masked slots inert: a NaN there still gives a finite loss and zero grad
    p2 = p.clone()
    p2[0, 1] = float("nan")
    pm = torch.tensor([[True, False], [True, True], [True, True]])
    leaf = p2.clone().requires_grad_(True)
    loss, _ = compute_loss("nearid", a * 2, leaf, d, pm, normalize=True)
    loss.backward()
    assert torch.isfinite(loss) and (leaf.grad[0, 1] == 0).all() and torch.isfinite(leaf.grad).all()


def test_loss_rejects_mixed_and_non_float_dtypes():
    a, p, d = _batch()
    with pytest.raises(TypeError, match=_exact(
            "compute_loss: mixed dtypes (anchor float32, positives float64, distractors float64); cast all "
            "three to one dtype, e.g. .float()")):
        compute_loss("nearid", a.float(), p, d)
    with pytest.raises(TypeError, match=_exact("compute_loss: distractors must be a floating-point tensor, "
                                               "got torch.int64")):
        compute_loss("nearid", a, p, d.long())


@pytest.mark.parametrize("key, value, message", [
    ("train.batch_size", -5, "train.batch_size=-5: must be >= 1"),
    ("train.batch_size", "-5", "train.batch_size=-5: must be >= 1"),
    ("train.batch_size", "abc", "train.batch_size: cannot read 'abc' as a whole number (current value 64)"),
    ("train.batch_size", 2.5, "train.batch_size: expected a whole number, got 2.5"),
    ("train.lr", 0, "train.lr=0.0: must be > 0"),
    ("train.lr", "fast", "train.lr: cannot read 'fast' as a number (current value 0.003)"),
    ("head.token_dropout", 1.5, "head.token_dropout=1.5: must be in [0, 1]"),
    ("train.mixed_precision", "fp8", "train.mixed_precision='fp8': expected one of no, fp16, bf16"),
    ("train.augment", "maybe", "train.augment: cannot read 'maybe' as a boolean (true/false)"),
    ("world.n_val_ids", -1, "world.n_val_ids=-1: must be >= 0"),
])
def test_config_override_names_the_key_and_checks_its_range(key, value, message):
    with pytest.raises(ConfigError, match=_exact(message)) as e:
        get_profile("mini", **{key: value})
    assert isinstance(e.value, ValueError)                     # a bad value is also a ValueError


def test_config_override_accepts_good_values():
    cfg = get_profile("mini", **{"train.batch_size": "16", "train.max_steps": "none", "train.lr": "3e-4",
                                 "train.warmup_steps": 0, "head.token_dropout": 0.0, "train.alpha": 2})
    assert (cfg.train.batch_size, cfg.train.max_steps, cfg.train.lr) == (16, None, 3e-4)
    assert isinstance(cfg.train.alpha, float) and cfg.train.alpha == 2.0


def test_rank_generator_group_by_typo(tmp_path):
    from PIL import Image

    rows = []
    for i, name in enumerate(["a", "a", "b", "b"]):
        p = tmp_path / f"{name}{i}.png"
        Image.new("RGB", (8, 8), (40 * i, 10, 10)).save(p)
        rows.append({"name": name, "species": "s", "file_path": str(p), "ref_path": str(p)})
    gal = pd.DataFrame(rows)
    gen = gal.assign(method="m")
    with pytest.raises(FPRLayoutError, match=_exact(
            "group_by='specie' is not a column of the generated table; use None (one gallery for all "
            "queries) or one of ['name', 'species']")):
        rank_generator(gen, gal, "efficientnet-lite0", tiny=True, group_by="specie", progress=False)


def test_nearid_checkpoint_missing_says_which_notebook_or_command_makes_it(tmp_path):
    from nearid_lib.models import load_encoder

    ck = tmp_path / "build" / "mini" / "checkpoints" / "nearid"
    with pytest.raises(FileNotFoundError, match=_exact(
            f"nearid: no trained head at {str(ck)!r} (a fresh clone has none): train one with notebook "
            f"03_train_nearid (`make build/mini/notebooks/03_train_nearid.ipynb`) or `nearid train --profile "
            f"mini`, which write build/mini/checkpoints/nearid; or use tiny=True for a random-init head")):
        load_encoder("nearid", checkpoint=str(ck))


def test_nearid_hub_miss_says_what_to_do(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from nearid_lib.models import load_encoder

    def offline(*args, **kw):
        raise LocalEntryNotFoundError("outgoing traffic has been disabled")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(OSError, match="^" + re.escape(
            "nearid: cannot load the head 'Aleksandar/nearid-siglip2' from the Hugging Face hub "
            "(LocalEntryNotFoundError); run once with hub access (HF_HUB_OFFLINE unset) to fill the cache, "
            "pass checkpoint=<local folder>, or train one with notebook 03_train_nearid")):
        load_encoder("nearid")
