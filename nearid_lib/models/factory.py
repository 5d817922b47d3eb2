"""The one encoder factory: :func:`load_encoder` makes every encoder the library scores.

``model, preprocess = load_encoder(spec, tiny=False, device="cpu", **kw)`` reads ``spec``, in this
order of precedence, as

1. a callable ``list[PIL] -> [N, D]`` (wrapped as :class:`~.user.UserEncoder`);
2. a module path ``package.module:function`` (the current folder is searched too), then a file
   path ``path/to/file.py:function`` (:mod:`.callables`);
3. a registered name or alias (:func:`~.registry.list_encoders`: the library's backbones, ``nearid``
   and its released head, FPR's specialised encoders, and plug-ins such as ID-Sim's ``idsim`` /
   ``idsim-release``), optionally with the suffix ``@random`` (the same class at a fixed random
   init: the chance reference), built by :func:`~.registry.build_registered`;
4. ``timm:<model>``, ``open_clip:<arch>[:<tag>]`` or ``hf-hub:<repo>`` (never module paths);
5. a Hugging Face hub id ``org/repo`` or a local model folder (:func:`~.user.hub_encoder`).

A registered encoder comes back with its ``preprocess``; a wrapped one with ``None`` (it takes PIL
images). ``cache=True`` returns the same model for the same arguments within a process (frozen
encoders that several protocols score; :func:`clear_encoder_cache` forgets them).

No encoder of the library is built anywhere else: a model that reuses a loaded one passes it in
(``load_encoder("nearid", checkpoint=..., backbone=<loaded backbone>)`` puts a head on that tower,
:mod:`.nearid_model`), and :func:`load_seed_heads` loads the heads of several training seeds over one
backbone.

:func:`resolve_encoder` is what the entry points (``score_encoder``, ``similarity``, the ``nearid``
commands) call first, before building or reading any data: :func:`load_encoder`, then two probe
images through the model, so a wrong argument fails in seconds with one line
(:class:`~.callables.EncoderSpecError`) that lists what was tried.
"""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import torch

from .callables import HUB_PREFIXES, EncoderSpecError, import_spec, one_line
from .registry import build_registered, encoder_aliases, list_encoders, load_backbone, resolve_name, split_weights
from .user import EncoderOutputError, UserEncoder, callable_label, hub_encoder, probe_images

__all__ = ["load_encoder", "load_seed_heads", "resolve_encoder", "ResolvedEncoder", "clear_encoder_cache",
           "encoder_kind"]

_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
REMOTE_CODE = ("miewid", "miewid-msv3")      # registered encoders whose class is remote code (opt-in)
_CACHE: dict[tuple, tuple[str, str | None, Any, Any]] = {}


def _registered_names() -> list[str]:
    return sorted({*list_encoders(), *encoder_aliases()})


def _is_registered(spec: str) -> bool:
    base = spec.partition("@")[0] if "@" in spec else spec
    return ":" not in spec and base in _registered_names()


def encoder_kind(spec: Any) -> str:
    """How :func:`load_encoder` reads ``spec`` without loading it: ``"callable"``, ``"module"`` /
    ``"file"`` (a ``:function`` spec; decided when it is imported), ``"registered"``, ``"timm"``,
    ``"open_clip"``, ``"hub"``, or ``"unknown"``."""
    if isinstance(spec, UserEncoder) or (callable(spec) and not isinstance(spec, (str, os.PathLike))):
        return "callable"
    if not isinstance(spec, (str, os.PathLike)):
        return "unknown"
    s = str(spec)
    if _is_registered(s):
        return "registered"
    prefix = s.split(":", 1)[0] if ":" in s else ""
    if prefix in HUB_PREFIXES:
        return "open_clip" if prefix == "hf-hub" else prefix
    if ":" in s:
        return "module"
    local = Path(s).expanduser()
    if local.is_dir() or (_HUB_ID_RE.match(s) and not local.exists()):
        return "hub"
    return "unknown"


def _hub(spec: str, what: str, device: str, kw: dict):
    try:
        return hub_encoder(spec, device=device, **kw)
    except OSError as err:
        raise OSError(f"{one_line(err, 600)} [read as {what}]") from err
    except Exception as err:            # e.g. timm's "Unknown model", open_clip's unknown architecture
        raise EncoderSpecError(f"encoder {spec!r} (read as {what}) failed to load: {type(err).__name__}: "
                               f"{one_line(err)}") from err


def _build(spec: Any, tiny: bool, device: Any, name: str | None, kw: dict,
           profile: Any = None) -> tuple[str, str | None, Any, Any]:
    """``(how, canonical name or None, model, preprocess)`` for ``spec`` (module docstring order)."""
    if isinstance(spec, UserEncoder):
        return "callable", None, spec, None
    if not isinstance(spec, (str, os.PathLike)):
        if not callable(spec):
            raise EncoderSpecError(f"encoder must be a name, 'module:function', 'file.py:function', a hub id or a "
                                   f"callable list[PIL] -> [N, D]; got {type(spec).__name__}")
        return "callable", None, UserEncoder(spec, name or callable_label(spec)), None
    s = str(spec)
    if not s.strip():
        raise EncoderSpecError("encoder: empty name")
    got = import_spec(s)                                                          # 2
    if got is not None:
        return got[0], None, UserEncoder(got[1], name or s), None
    if _is_registered(s):                                                         # 3
        base, weights = split_weights(s)
        if weights is not None:
            kw = {**kw, "weights": weights}
        canon = resolve_name(base)
        if profile is not None:        # as this profile loads encoders: its tiny flag, size, dtype
            model, pre = load_backbone(profile, device, name=canon, **kw)
        else:
            model, pre = build_registered(canon, tiny=tiny, device=device, **kw)
        return "registered", canon, model, pre
    prefix = s.split(":", 1)[0] if ":" in s else ""
    dev = str(device or "cpu")
    if prefix in HUB_PREFIXES:                                                    # 4
        how = "open_clip" if prefix == "hf-hub" else prefix
        return how, None, UserEncoder(_hub(s, f"a {prefix}: identifier", dev, kw), name or s), None
    local = Path(s).expanduser()
    if local.is_dir() or (_HUB_ID_RE.match(s) and not local.exists()):           # 5
        what = "a local model folder" if local.is_dir() else \
            "a Hugging Face hub id (it is no module path, file path or registered name)"
        return "hub", None, UserEncoder(_hub(s, what, dev, kw), name or s), None
    names = _registered_names()
    close = difflib.get_close_matches(s, names, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
    raise EncoderSpecError(
        f"unknown encoder {s!r}{hint}; tried: module path (needs 'package.module:function'), file path "
        f"(needs 'file.py:function'), registered name (valid: {', '.join(names)}), timm:/open_clip:/hf-hub: "
        f"prefix (none), hub id (needs 'org/repo' or a local model folder)")


def load_encoder(spec: Any, tiny: bool = False, device: str | torch.device | None = "cpu", *,
                 name: str | None = None, cache: bool = False, profile: Any = None, **kw: Any) -> tuple[Any, Any]:
    """``(model, preprocess)`` for any encoder argument (the module docstring lists the kinds).

    ``tiny``: a random-init tiny config of a registered class (offline); ``name``: how a wrapped
    encoder is labelled; ``cache``: one model per process for the same arguments; other keywords go
    to the builder (registered: ``weights``, ``dtype``, ``image_size``, ``checkpoint``...; hub:
    the model constructor, e.g. ``pretrained=False``); ``profile``: a registered name loaded the way
    that profile loads encoders (:func:`~.registry.load_backbone`: its tiny flag, its image size for
    CNNs, its device when ``device`` is None). ``allow_remote_code`` reaches only
    ``miewid`` / ``miewid-msv3``, the registered encoders that run code from the hub."""
    _, _, model, pre = _load(spec, tiny, device, name, cache, profile, kw)
    return model, pre


def load_seed_heads(checkpoints: Mapping[int, str | os.PathLike] | Iterable[tuple[int, str | os.PathLike]],
                    **kw: Any) -> dict[int, Any]:
    """``{seed: NearID encoder}`` for the head folders of several training seeds (a mapping or
    ``(seed, folder)`` pairs, in order): the first loaded whole by :func:`load_encoder`, every other
    one's head put on that encoder's backbone object, so one tower is loaded for all seeds and all of
    them read the same feature caches. ``kw`` go to :func:`load_encoder` (``device``...)."""
    out: dict[int, Any] = {}
    items = checkpoints.items() if isinstance(checkpoints, Mapping) else checkpoints
    for seed, ckpt in items:
        first = next(iter(out.values()), None)
        share = {} if first is None else {"backbone": first.backbone}
        out[int(seed)] = load_encoder("nearid", checkpoint=str(ckpt), **share, **kw)[0]
    return out


def _load(spec: Any, tiny: bool, device: Any, name: str | None, cache: bool, profile: Any,
          kw: dict) -> tuple[str, str | None, Any, Any]:
    """:func:`_build` behind the per-process cache (``cache=True``): ``(how, canon, model, preprocess)``."""
    kw = dict(kw)
    if isinstance(spec, str) and _is_registered(spec) and resolve_name(split_weights(spec)[0]) not in REMOTE_CODE:
        kw.pop("allow_remote_code", None)
    if not cache:
        return _build(spec, tiny, device, name, kw, profile)
    key = (spec if isinstance(spec, str) else id(spec), bool(tiny), str(device), name,
           getattr(profile, "name", None), tuple(sorted((k, repr(v)) for k, v in kw.items())))
    if key not in _CACHE:
        _CACHE[key] = _build(spec, tiny, device, name, kw, profile)
    return _CACHE[key]


def clear_encoder_cache() -> None:
    """Forget the encoders :func:`load_encoder` kept with ``cache=True`` (frees their memory)."""
    _CACHE.clear()


@dataclass
class ResolvedEncoder:
    """What an encoder argument resolved to, loaded and probed: ``how`` is ``"callable"``,
    ``"module"``, ``"file"``, ``"registered"``, ``"timm"``, ``"open_clip"`` or ``"hub"``; ``model`` is
    a library :class:`~nearid_lib.models.Encoder` (registered; ``canon`` its name) or a
    :class:`~.user.UserEncoder`; ``label`` names it in tables and figures."""

    spec: str
    how: str
    label: str
    model: Any
    canon: str | None = None


def _probe(spec: str, model: Any) -> None:
    try:
        out = model.embed(probe_images())
    except Exception as err:
        raise EncoderSpecError(f"encoder {spec!r} failed on the two probe images: {type(err).__name__}: "
                               f"{one_line(err)}") from err
    out = out.detach().float().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float32)
    if out.ndim != 2 or out.shape[0] != 2 or not np.isfinite(out).all():
        raise EncoderOutputError(f"encoder {spec!r} returned shape {tuple(out.shape)} (or non-finite values) "
                                 f"for the two probe images; expected [2, D]")


def resolve_encoder(encoder: Any, *, name: str | None = None, device: str | torch.device | None = "cpu",
                    encoder_kw: dict | None = None, probe: bool = True, profile: Any = None) -> ResolvedEncoder:
    """:func:`load_encoder` of an encoder argument **before** any data is built, then a probe, so a
    wrong argument fails in seconds. ``encoder_kw`` go to :func:`load_encoder` (``tiny``,
    ``cache``, builder keywords), as does ``profile``. Every failure is an :class:`~.callables.EncoderSpecError` (or the
    hub's ``OSError``) whose one-line message lists what was tried; a registered encoder then
    embeds two small probe images (``probe=False`` skips that; a wrapped callable is always
    probed when it is wrapped)."""
    kw = dict(encoder_kw or {})
    tiny, cache = bool(kw.pop("tiny", False)), bool(kw.pop("cache", False))
    spec = encoder.name if isinstance(encoder, UserEncoder) else (
        str(encoder) if isinstance(encoder, (str, os.PathLike)) else None)
    registered = isinstance(encoder, str) and _is_registered(encoder)
    try:
        how, canon, model, _ = _load(encoder, tiny, device, name, cache, profile, kw)
    except (OSError, ValueError, KeyError):             # the library's own messages (offline, no checkpoint)
        raise
    except Exception as err:                             # e.g. a keyword this encoder does not take
        if not registered:
            raise
        canon = resolve_name(split_weights(encoder)[0])
        what = "a registered name" if canon == encoder else f"registered as {canon!r}"
        raise EncoderSpecError(f"encoder {encoder!r} ({what}) failed to load: {type(err).__name__}: "
                               f"{one_line(err)}") from err
    if how == "registered":
        if probe:
            _probe(encoder, model)
        return ResolvedEncoder(spec, how, name or spec, model, canon)
    return ResolvedEncoder(spec or model.name, how, name or model.name, model)
