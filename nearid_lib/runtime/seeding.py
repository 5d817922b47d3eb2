"""The one seeding helper. Everything random in the project is derived from here.

``seed_everything`` seeds python, numpy and torch (CPU and CUDA) with ``seed + rank`` so that
data-parallel ranks draw different augmentations; ``worker_init_fn`` seeds DataLoader workers;
``derive_seed`` gives a stable per-item seed from string/int keys (independent of the order of
work, which is what makes sharded generation and resumed runs byte-identical);
``make_rng`` returns an explicit ``numpy.random.Generator`` for code that takes an ``rng``.
"""
from __future__ import annotations

import hashlib
import os
import random

import numpy as np

__all__ = ["seed_everything", "derive_seed", "make_rng", "worker_init_fn", "torch_generator"]


def derive_seed(*keys: object, base: int = 0) -> int:
    """Deterministic 63-bit seed from ``base`` and any keys (their ``str``), stable across runs,
    processes and platforms (unlike ``hash``)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(str(int(base)).encode())
    for k in keys:
        h.update(b"\x1f")
        h.update(str(k).encode())
    return int.from_bytes(h.digest(), "little") & ((1 << 63) - 1)


def make_rng(seed: int, *keys: object) -> np.random.Generator:
    """An explicit numpy Generator for ``seed`` (and optional sub-keys)."""
    return np.random.default_rng(derive_seed(*keys, base=seed) if keys else seed)


def seed_everything(seed: int, rank: int = 0, deterministic: bool = False) -> int:
    """Seed python, numpy and torch with ``seed + rank``; returns the effective seed.

    ``deterministic=True`` also asks torch for deterministic kernels (slower on GPU)."""
    eff = int(seed) + int(rank)
    random.seed(eff)
    np.random.seed(eff % (2**32))
    os.environ["PYTHONHASHSEED"] = str(eff)
    try:
        import torch

        torch.manual_seed(eff)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(eff)
        if deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    return eff


def worker_init_fn(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: derive numpy/python seeds from torch's per-worker seed."""
    import torch

    s = torch.initial_seed() % (2**32)
    np.random.seed((s + worker_id) % (2**32))
    random.seed(s + worker_id)


def torch_generator(seed: int, *keys: object):
    """A ``torch.Generator`` seeded from ``seed`` and optional keys."""
    import torch

    g = torch.Generator()
    g.manual_seed(derive_seed(*keys, base=seed) if keys else int(seed))
    return g
