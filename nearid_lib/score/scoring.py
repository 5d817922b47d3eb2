"""The one call: :func:`score_encoder` (the package docstring says what it does)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..runtime.allocator import tune_allocator
from ..config import get_profile
from ..data import NearIDData, build_world, load_nearid, nearid_root
from ..features import Embedder, profile_embedders
from ..models import ResolvedEncoder, encoder_kind, load_encoder, resolve_encoder, split_weights
from ..nearid.tables import PAPER_KEYS
from ..paths import cache_dir, checkpoint_dir
from ..paths import out_dir as out_root
from .card import ScoreReport, assemble_table, write_card
from .participants import PROTOCOLS, Participant
from .protocols import run_fpr, run_idsim, run_nearid

__all__ = ["score_encoder"]


def _resolve(encoder, cfg, name, device, encoder_kw) -> ResolvedEncoder:
    """The user's encoder resolved, loaded and probed (before any data is built): a registered name
    the way this profile loads encoders (``load_backbone``), anything else as a :class:`UserEncoder`."""
    # a registered encoder runs on the profile's device (load_backbone), a user's on ``device``
    dev = None if encoder_kind(encoder) == "registered" else device
    return resolve_encoder(encoder, name=name, device=dev, encoder_kw=encoder_kw, profile=cfg)


def _user(res: ResolvedEncoder, cfg, data, name, store_folder, batch_size, progress) -> Participant:
    """The user's participant: a registered name through the library's caches (the grids layout of
    an :class:`~nearid_lib.features.Embedder`), anything else in rows under ``store_folder``."""
    if res.canon is not None:
        # pooled outputs only (a head needs tokens): the same cache key as the frozen baselines'
        label = name or res.canon
        emb = Embedder(res.model, data, profile=cfg, progress=progress, name=res.canon, label=label,
                       store_tokens=None if res.canon == "nearid" else False)
        return Participant("yours", label, "yours", emb, res.model)
    ue = res.model
    emb = Embedder(ue, data, layout="rows", folder=store_folder, batch_size=batch_size, progress=progress,
                   name=ue.name)
    return Participant("yours", ue.name, "yours", emb, ue)


def _baselines(cfg, data, progress: bool, notes: list[str]) -> list[Participant]:
    """The profile's frozen encoders, the NearID head (when trained) and ID-Sim (when trained)."""
    ck = checkpoint_dir(cfg.name)
    # the chance reference ("<encoder>@random") stays in the notebooks: the card states chance levels
    names = [n for n in cfg.eval.encoders if (n != "nearid" or (ck / "nearid").exists())
             and split_weights(n)[1] is None]
    if "nearid" in cfg.eval.encoders and "nearid" not in names:
        notes.append(f"NearID head: not trained for profile {cfg.name!r} yet ({ck / 'nearid'} absent); train it "
                     f"with notebook 03_train_nearid or `nearid train --profile {cfg.name}`")
    sub = replace(cfg, eval=replace(cfg.eval, encoders=tuple(names)))
    out = [Participant(e.name, e.label, "nearid" if e.name == "nearid" else "frozen", e, e.encoder)
           for e in profile_embedders(sub, data, progress=progress)]
    if (ck / "idsim").exists():
        out.append(Participant("idsim", f"ID-Sim ({cfg.idsim.backbone} + LoRA, {cfg.name})", "idsim",
                               None, load_encoder("idsim", checkpoint=str(ck / "idsim"))[0]))
    else:
        notes.append(f"ID-Sim: not trained for profile {cfg.name!r} yet ({ck / 'idsim'} absent); notebook "
                     f"09_train_idsim trains it")
    return out


def _check_protocols(protocols) -> tuple[str, ...]:
    protocols = (protocols,) if isinstance(protocols, str) else tuple(protocols)
    bad = [p for p in protocols if p not in PROTOCOLS]
    if bad or not protocols:
        raise ValueError(f"protocols: unknown {bad}; choose from {', '.join(PROTOCOLS)}")
    return protocols


def _profile_data(cfg, progress: bool) -> NearIDData:
    """The profile's NearID-schema data, only what the protocols read: the procedural world's
    evaluation split (``cfg.eval.split``: its identities with their distractors and MTG pairs, plus
    the edit grids and FPR galleries; not the graded set, which it does not score), built once and
    reused (a full world already on disk is used as it is), or the released data already
    materialised at ``nearid_root(profile)``."""
    if cfg.world.source == "procedural":
        splits = tuple(dict.fromkeys((cfg.eval.split, "test")))     # grids and galleries come with test
        return load_nearid(build_world(cfg, progress=progress, splits=splits, graded=False), splits=splits)
    return load_nearid(nearid_root(cfg.name))


def _named(df: pd.DataFrame | None, parts: Sequence[Participant]) -> pd.DataFrame | None:
    """A per-protocol table as the user reads it: ``encoder`` is each participant's own name (the
    protocols key their results by ``Participant.key``, e.g. "yours"), ``kind`` says which one was
    scored. NearID Table 5's ``method`` (the paper row a participant is compared with) becomes
    ``paper_row``: empty for encoders without one (yours included), ``"SigLIP2 (stand-in)"`` for the
    frozen EfficientNet-Lite0 of ``mini``, which stands in for the paper's SigLIP2, so a Lite0 row
    never reads as SigLIP2."""
    if df is None or "encoder" not in df.columns:
        return df
    lab, kind = {p.key: p.label for p in parts}, {p.key: p.kind for p in parts}
    keys = df["encoder"]
    out = df.drop(columns=[c for c in ("ours_label", "label") if c in df.columns])
    out["encoder"] = keys.map(lab).fillna(keys)
    out.insert(int(out.columns.get_loc("encoder")) + 1, "kind", keys.map(kind))
    if "method" in out.columns and "source_label" in out.columns:      # NearID per-source (Table 5 form)
        first: dict[str, str] = {}
        for canon, v in PAPER_KEYS.items():
            first.setdefault(v[1], canon)       # the paper's own model; later entries stand in for it
        name = {p.key: getattr(p.embedder, "name", None) for p in parts}

        def row(k: str) -> str:
            v = PAPER_KEYS.get(name.get(k) or "")
            if v is None or kind.get(k) == "yours":
                return ""
            return v[1] if first[v[1]] == name[k] else f"{v[1]} (stand-in)"

        out = out.drop(columns="method")
        out.insert(int(out.columns.get_loc("kind")) + 1, "paper_row", [row(k) for k in keys])
    return out


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")[:60] or "encoder"


def score_encoder(encoder: Any, protocols: Sequence[str] = PROTOCOLS, profile: str = "mini", *,
                  name: str | None = None, data: NearIDData | None = None, out_dir: str | Path | None = None,
                  baselines: bool = True, seed: int = 0, batch_size: int = 32, progress: bool = True,
                  cache: bool = True, overrides: dict | None = None, device: str = "cpu",
                  encoder_kw: dict | None = None, write: bool = True) -> ScoreReport:
    """Score ``encoder`` on the NearID, ID-Sim and FPR protocols of ``profile`` (see the module
    docstring) and write its table and report card.

    The encoder is resolved, loaded and probed on two small images first
    (:func:`~nearid_lib.models.resolve_encoder`), so a wrong argument fails in seconds with a
    message listing what was tried, before any data is built.

    Args:
        encoder: ``"package.module:function"``, ``"file.py:function"``, a registered name, a hub
            identifier (``"timm:..."``, ``"open_clip:..."``, ``"<org>/<repo>"``), or a callable
            ``list[PIL] -> [N, D]`` (strings are tried in that order).
        protocols: any of ``"nearid"``, ``"idsim"``, ``"fpr"``.
        profile: ``"smoke"`` (seconds), ``"mini"`` (offline reproduction, the default), ``"paper"``.
        name: the label of your row (default: the name or the callable's name).
        data: an already loaded :class:`~nearid_lib.data.NearIDData` (default: the profile's).
        out_dir: where the table and card go (default ``build/<profile>/score/<name>``).
        baselines: also score the profile's frozen encoders, NearID head and ID-Sim (when trained).
        cache: keep a callable's embeddings under ``cache_dir(profile)/"score"``.
        overrides: dotted config overrides, as for :func:`~nearid_lib.config.get_profile`.
        encoder_kw: keyword arguments for loading a named encoder (e.g. ``{"checkpoint": ...}``).
        write: False returns the report without writing files.

    The calling process gets glibc's malloc thresholds for large tensors
    (:func:`~nearid_lib.runtime.allocator.tune_allocator`; ``runtime.tune_malloc=false`` leaves them).
    """
    protocols = _check_protocols(protocols)
    cfg = get_profile(profile, overrides, seed=seed)
    tune_allocator(cfg.runtime.tune_malloc)       # ~2x faster CPU forwards (nearid_lib.runtime.allocator)
    # a wrong encoder argument fails here, in seconds, before the data is built
    resolved = _resolve(encoder, cfg, name, device, encoder_kw)
    data = data if data is not None else _profile_data(cfg, progress)
    folder = cache_dir(cfg.name) / "score" if cache else None
    notes: list[str] = []
    user = _user(resolved, cfg, data, name, folder, batch_size, progress)
    parts = [user] + (_baselines(cfg, data, progress, notes) if baselines else [])
    results: dict[str, Any] = {}
    if "nearid" in protocols:
        results["nearid"] = run_nearid([p for p in parts if p.embedder is not None], cfg, data)
    if "idsim" in protocols:
        results["idsim"] = run_idsim(parts, cfg, data, seed, notes)
    if "fpr" in protocols:
        results["fpr"] = run_fpr([p for p in parts if p.model is not None], cfg, data, batch_size, progress,
                                 cache, notes)
    rep = ScoreReport(encoder=user.label, profile=cfg.name, table=assemble_table(parts, results, cfg.name),
                      nearid=_named(results.get("nearid", {}).get("per_source"), parts),
                      idsim=_named(results.get("idsim", {}).get("summary"), parts),
                      fpr=_named(results.get("fpr", {}).get("methods"), parts), notes=notes, data=data, extra=results)
    if write:
        rep.files = write_card(rep, Path(out_dir) if out_dir else out_root(cfg.name) / "score" / _slug(user.label),
                               cfg, seed)
    return rep
