"""The one seeding helper: stable derived seeds, reproducible torch/numpy draws."""
from __future__ import annotations

import numpy as np

from nearid_lib.runtime import seeding


def test_derive_seed_is_stable_and_key_sensitive():
    a = seeding.derive_seed("item-1", base=0)
    assert a == seeding.derive_seed("item-1", base=0)
    assert a != seeding.derive_seed("item-2", base=0)
    assert a != seeding.derive_seed("item-1", base=1)
    assert 0 <= a < 2**63
    # known value: guards against an accidental change of the derivation (would change datasets)
    import hashlib
    h = hashlib.blake2b(digest_size=8)
    h.update(b"0"); h.update(b"\x1f"); h.update(b"item-1")
    assert a == int.from_bytes(h.digest(), "little") & ((1 << 63) - 1)


def test_seed_everything_reproduces_torch_and_numpy():
    import torch
    seeding.seed_everything(3)
    x1, n1 = torch.rand(3), np.random.rand(3)
    seeding.seed_everything(3)
    x2, n2 = torch.rand(3), np.random.rand(3)
    assert torch.equal(x1, x2) and np.array_equal(n1, n2)
    seeding.seed_everything(3, rank=1)
    assert not torch.equal(x1, torch.rand(3))
