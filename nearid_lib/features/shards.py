"""A sharded, append-only store of backbone tokens in a compact dtype (the paper-scale data path).

Why not :class:`~nearid_lib.features.TokenCache` at paper scale: it preallocates one float16 array
per image group and variant and needs the whole list of images up front. At SigLIP2-so400m size a
token grid is 729 x 1152 (1.68 MB in float16), and role-aware masking needs two variants per image,
so the paper's training images alone would take ~800 GB. This store keeps ``int8`` (or ``fp8``)
tokens with one float32 scale per token (0.84 MB per grid, exact to ~0.4% of a token's largest
entry, see ``benchmarks/README.md``), fills lazily (a grid is written the first time a
training step asks for it, so nothing is computed that is never read), honours a disk budget
(``max_bytes``: past it, callers stream the backbone instead), and survives a kill.

Layout of a store folder::

    meta.json                  n_tokens, token_dim, dtype, key, record_bytes (written once)
    <writer>-<seq:05d>.bin     fixed-size records, appended: payload [N*D] (+ scales [N] float32)
    <writer>-<seq:05d>.idx     one committed record per line: "relpath<TAB>variant<TAB>slot"

A batch of records is written and fsync'ed before its index lines are appended, so a kill leaves
at worst orphan bytes past the last committed record (truncated on the next open) or a torn last
index line (dropped on the next open). Each process writes its own shards (``writer``: e.g. the
rank), so several ranks can fill one store; :meth:`refresh` picks up the others' records.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from ..io_utils import atomic_write_text

__all__ = ["ShardedTokenStore", "CODECS", "encode_tokens", "decode_tokens", "record_bytes"]

Key = tuple[str, str]          # (relpath, variant)

# dtype -> (bytes per element, has a per-token scale, max representable magnitude for the scale)
CODECS = {"float32": (4, False, None), "float16": (2, False, None), "bfloat16": (2, False, None),
          "int8": (1, True, 127.0), "fp8": (1, True, 448.0)}


def record_bytes(n_tokens: int, token_dim: int, dtype: str) -> int:
    """Bytes of one stored token grid (payload + per-token float32 scales)."""
    nbytes, scaled, _ = _codec(dtype)
    return n_tokens * token_dim * nbytes + (4 * n_tokens if scaled else 0)


def _codec(dtype: str):
    if dtype not in CODECS:
        raise ValueError(f"unknown store dtype {dtype!r}; valid: {', '.join(CODECS)}")
    return CODECS[dtype]


def encode_tokens(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """Float tokens [S, N, D] -> uint8 records [S, record_bytes] (on x's device)."""
    nbytes, scaled, qmax = _codec(dtype)
    s, n, d = x.shape
    x = x.float()
    if not scaled:
        t = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
        return x.to(t).contiguous().view(torch.uint8).reshape(s, n * d * nbytes)
    # symmetric per-token scale: the token's largest |entry| maps to the codec's largest value
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / qmax          # [S, N, 1]
    y = x / scale
    q = (y.round().clamp(-127, 127).to(torch.int8) if dtype == "int8"
         else y.clamp(-qmax, qmax).to(torch.float8_e4m3fn))
    payload = q.contiguous().view(torch.uint8).reshape(s, n * d)
    scales = scale.reshape(s, n).contiguous().view(torch.uint8).reshape(s, 4 * n)
    return torch.cat([payload, scales], dim=1)


def decode_tokens(raw: torch.Tensor, n_tokens: int, token_dim: int, dtype: str,
                  out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 records [S, record_bytes] -> tokens [S, N, D] in ``out_dtype`` (on raw's device)."""
    nbytes, scaled, _ = _codec(dtype)
    s, nd = raw.shape[0], n_tokens * token_dim
    if raw.shape[1] != record_bytes(n_tokens, token_dim, dtype):
        raise ValueError(f"records of {raw.shape[1]} bytes do not match {dtype} [{n_tokens}, {token_dim}]")
    raw = raw.contiguous()
    if not scaled:
        t = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
        return raw.view(t).reshape(s, n_tokens, token_dim).to(out_dtype)
    q = raw[:, :nd].contiguous().view(torch.int8 if dtype == "int8" else torch.float8_e4m3fn)
    scale = raw[:, nd:].contiguous().view(torch.float32).reshape(s, n_tokens, 1)
    return (q.reshape(s, n_tokens, token_dim).to(torch.float32) * scale).to(out_dtype)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:40] or "w"


class _Shard:
    """One (data, index) file pair of a writer; ``n`` = committed records."""

    def __init__(self, bin_path: Path, rb: int, repair: bool):
        self.bin, self.idx, self.rb = bin_path, bin_path.with_suffix(".idx"), rb
        self.keys: list[Key] = []
        if self.idx.exists():
            text = self.idx.read_bytes()
            good = text[:text.rfind(b"\n") + 1]            # a torn last line was never committed
            if repair and len(good) != len(text):
                with open(self.idx, "r+b") as fh:
                    fh.truncate(len(good))
            for i, line in enumerate(good.decode().splitlines()):
                rel, variant, slot = line.split("\t")
                if int(slot) != i:
                    raise ValueError(f"{self.idx}: line {i} names slot {slot}")
                self.keys.append((rel, variant))
        if repair and self.bin.exists() and self.bin.stat().st_size != self.n * rb:
            with open(self.bin, "r+b") as fh:               # orphan records of a killed batch
                fh.truncate(self.n * rb)

    @property
    def n(self) -> int:
        return len(self.keys)


class ShardedTokenStore:
    """Token grids keyed by ``(relpath, variant)``, stored in ``dtype`` (see the module docstring).

    Args:
        root: the store folder (created).
        n_tokens, token_dim: grid shape N x D (checked against an existing store).
        dtype: ``"int8"`` (default), ``"fp8"``, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        key: what produced the tokens (backbone cache key + dataset fingerprint); an existing store
            with another key raises (use another folder).
        writer: name of this process's shards (e.g. ``f"rank{rank}"``); None opens read-only.
        shard_records: records per shard file before a new one starts.
        max_bytes: disk budget for all shards; :meth:`put` stops writing at it.
    """

    def __init__(self, root: str | os.PathLike, n_tokens: int, token_dim: int, dtype: str = "int8",
                 key: str = "", writer: str | None = "w0", shard_records: int = 1024,
                 max_bytes: int | None = None):
        _codec(dtype)
        self.root = Path(root)
        self.n_tokens, self.token_dim, self.dtype, self.key = int(n_tokens), int(token_dim), dtype, key
        self.rb = record_bytes(self.n_tokens, self.token_dim, dtype)
        self.writer = None if writer is None else _slug(writer)
        self.shard_records, self.max_bytes = int(shard_records), max_bytes
        meta = {"n_tokens": self.n_tokens, "token_dim": self.token_dim, "dtype": dtype, "key": key,
                "record_bytes": self.rb}
        mpath = self.root / "meta.json"
        if mpath.exists():
            have = json.loads(mpath.read_text())
            if have != meta:
                diff = {k: (have.get(k), v) for k, v in meta.items() if have.get(k) != v}
                raise ValueError(f"{self.root} holds another store (existing, requested): {diff}")
        elif self.writer is None:
            raise FileNotFoundError(f"{self.root} is not a token store (no meta.json)")
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            # a unique temporary per process: the ranks of one launch create the store at the same moment
            atomic_write_text(mpath, json.dumps(meta, indent=1))
        self._shards: dict[str, _Shard] = {}
        self._where: dict[Key, tuple[str, int]] = {}
        self.refresh()

    @classmethod
    def open(cls, root: str | os.PathLike) -> "ShardedTokenStore":
        """An existing store, read-only."""
        m = json.loads((Path(root) / "meta.json").read_text())
        return cls(root, m["n_tokens"], m["token_dim"], m["dtype"], m["key"], writer=None)

    # ------------------------------------------------------------------ index
    def refresh(self) -> None:
        """(Re)read every shard's index; this writer's shards are repaired after a kill."""
        for path in sorted(self.root.glob("*.bin")):
            name = path.stem
            own = self.writer is not None and name.rsplit("-", 1)[0] == self.writer
            old = self._shards.get(name)
            if old is not None and own:
                continue                                    # our own shards are tracked in memory
            sh = _Shard(path, self.rb, repair=own)
            self._shards[name] = sh
            for slot, k in enumerate(sh.keys[old.n if old else 0:], start=old.n if old else 0):
                self._where.setdefault(k, (name, slot))

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: Key) -> bool:
        return tuple(key) in self._where

    def has(self, keys: Iterable[Key]) -> np.ndarray:
        return np.fromiter((tuple(k) in self._where for k in keys), dtype=bool)

    def keys(self) -> list[Key]:
        return list(self._where)

    @property
    def bytes_on_disk(self) -> int:
        return sum(sh.n for sh in self._shards.values()) * self.rb

    # ------------------------------------------------------------------ reading
    def get_raw(self, keys: Sequence[Key]) -> np.ndarray:
        """uint8 records [S, record_bytes] of ``keys`` (a missing key raises), read in file order."""
        locs = []
        for k in keys:
            try:
                locs.append(self._where[tuple(k)])
            except KeyError:
                raise KeyError(f"{k!r} is not in token store {self.root.name}") from None
        out = np.empty((len(keys), self.rb), dtype=np.uint8)
        order = sorted(range(len(keys)), key=lambda i: locs[i])
        fds: dict[str, int] = {}
        try:
            for i in order:
                name, slot = locs[i]
                if name not in fds:
                    fds[name] = os.open(self._shards[name].bin, os.O_RDONLY)
                got = os.preadv(fds[name], [memoryview(out[i])], slot * self.rb)
                if got != self.rb:
                    raise OSError(f"short read in {name} slot {slot}: {got} of {self.rb} bytes")
        finally:
            for fd in fds.values():
                os.close(fd)
        return out

    def get(self, keys: Sequence[Key], device: torch.device | str = "cpu",
            out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Tokens [S, N, D] of ``keys``, decoded on ``device`` (the uint8 records travel, not floats)."""
        raw = torch.from_numpy(self.get_raw(keys)).to(device)
        return decode_tokens(raw, self.n_tokens, self.token_dim, self.dtype, out_dtype)

    # ------------------------------------------------------------------ writing
    def _open_shard(self) -> _Shard:
        mine = sorted(n for n in self._shards if n.rsplit("-", 1)[0] == self.writer)
        if mine and self._shards[mine[-1]].n < self.shard_records:
            return self._shards[mine[-1]]
        seq = int(mine[-1].rsplit("-", 1)[1]) + 1 if mine else 0
        name = f"{self.writer}-{seq:05d}"
        sh = _Shard(self.root / f"{name}.bin", self.rb, repair=True)
        self._shards[name] = sh
        return sh

    def room(self) -> int:
        """How many more records the disk budget allows (a large number without a budget)."""
        if self.max_bytes is None:
            return 1 << 62
        return max(0, (int(self.max_bytes) - self.bytes_on_disk) // self.rb)

    def put(self, keys: Sequence[Key], tokens: torch.Tensor) -> int:
        """Store ``tokens`` [S, N, D] under ``keys``; keys already present (or repeated) are skipped,
        and writing stops at the disk budget. Returns the number of records written."""
        if self.writer is None:
            raise PermissionError(f"token store {self.root.name} was opened read-only")
        if tokens.shape[1:] != (self.n_tokens, self.token_dim) or len(tokens) != len(keys):
            raise ValueError(f"tokens {tuple(tokens.shape)} do not match {len(keys)} keys of "
                             f"[{self.n_tokens}, {self.token_dim}]")
        seen: set[Key] = set()
        todo = []
        for i, k in enumerate(keys):
            k = (str(k[0]), str(k[1]))
            if any(c in k[0] + k[1] for c in "\t\n"):
                raise ValueError(f"key {k!r} contains a tab or newline")
            if k not in self._where and k not in seen:
                seen.add(k)
                todo.append((i, k))
        todo = todo[:self.room()]
        if not todo:
            return 0
        raw = encode_tokens(tokens[torch.as_tensor([i for i, _ in todo])].detach(), self.dtype).cpu().numpy()
        written = 0
        while written < len(todo):
            sh = self._open_shard()
            take = min(len(todo) - written, self.shard_records - sh.n)
            self._append(sh, [k for _, k in todo[written:written + take]], raw[written:written + take])
            written += take
        return written

    def _append(self, sh: _Shard, keys: list[Key], raw: np.ndarray) -> None:
        with open(sh.bin, "ab") as fh:                       # data first, durable ...
            fh.write(raw.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        self._commit(sh, keys)                               # ... then the index lines

    def _commit(self, sh: _Shard, keys: list[Key]) -> None:
        lines = "".join(f"{r}\t{v}\t{sh.n + j}\n" for j, (r, v) in enumerate(keys))
        with open(sh.idx, "a") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())
        name = sh.bin.stem
        for k in keys:
            self._where[k] = (name, sh.n)
            sh.keys.append(k)

    def __repr__(self) -> str:
        return (f"ShardedTokenStore({self.root.name}: {len(self)} grids [{self.n_tokens}, {self.token_dim}] "
                f"{self.dtype}, {self.bytes_on_disk / 1e9:.2f} GB in {len(self._shards)} shards)")
