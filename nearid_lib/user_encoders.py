"""A researcher's own encoder behind one interface, for :func:`nearid_lib.score.score_encoder`.

``as_user_encoder(encoder)`` accepts

* any callable ``list[PIL.Image] -> array [N, D]`` (numpy or torch; a model's bound method, a
  function, an ``nn.Module`` taking PIL images);
* a Hugging Face / open_clip / timm identifier (the ``paper`` profile, where the hub is reachable):
  ``"timm:<model>"`` (``timm.create_model(..., pretrained=True, num_classes=0)``),
  ``"open_clip:<arch>[:<pretrained tag>]"`` or ``"hf-hub:<repo>"`` (open_clip's image tower), or
  ``"<org>/<repo>"`` / a local model folder (transformers ``AutoModel`` + ``AutoImageProcessor``;
  image features, else the pooled output, else the first token);
* ``"package.module:attribute"`` or ``"path/to/file.py:attribute"`` naming such a callable (the
  command line's way to pass your own function; read by :mod:`nearid_lib.encoder_specs`).

and returns a :class:`UserEncoder`: ``embed(images, batch_size) -> Tensor [N, D]`` (L2-normalised,
images through :mod:`nearid_lib.imageio`), ``name``, ``cache_key()`` and ``fingerprint``. A callable
has no weights to hash, so its fingerprint is *behavioural*: its name and its outputs (rounded to
1e-4) on two fixed probe images; editing the model changes them, so cached embeddings are never
served for another model (a non-deterministic callable just never hits the cache).

:func:`resolve_encoder` is what every entry point (``score_encoder``, ``similarity``, the ``nearid``
commands) calls first, before building or reading any data: it reads a string as a module path, a
file path, a registered name, a ``timm:``/``open_clip:`` identifier, then a hub id, loads it and
probes it on the two images, so a wrong argument fails in seconds with a one-line
:class:`EncoderSpecError` listing what was tried.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .encoder_specs import HUB_PREFIXES, EncoderSpecError, import_callable, import_spec, one_line
from .imageio import as_sequence, load_images

__all__ = ["UserEncoder", "as_user_encoder", "probe_images", "hub_encoder", "import_callable", "EncoderOutputError",
           "EncoderSpecError", "ResolvedEncoder", "resolve_encoder"]


class EncoderOutputError(ValueError):
    """A user encoder returned something that is not one finite, non-zero [N, D] row per image."""


def probe_images(size: int = 64) -> list[Image.Image]:
    """Two fixed RGB images (a colour ramp and a checkerboard) that fingerprint a callable."""
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    ramp = np.stack([x, y, 1 - x * y], -1)
    check = (((np.mgrid[0:size, 0:size] // 8).sum(0) % 2)[..., None] * np.array([0.9, 0.3, 0.1]) + 0.05)
    return [Image.fromarray((a * 255).round().astype(np.uint8), "RGB") for a in (ramp, check)]


class UserEncoder:
    """Wraps ``fn: list[PIL] -> [N, D]``: batches, checks and L2-normalises its output.

    Looks like a library :class:`~nearid_lib.models.Encoder` to the scoring code (``embed``,
    ``cache_key``, ``name``, ``frozen``, ``embed_dim``), so FPR's embedding cache and NearID's
    bench encoders take it as they are."""

    frozen = True
    tiny = False

    def __init__(self, fn: Callable[[list[Image.Image]], Any], name: str):
        self.fn, self.name = fn, name
        try:
            probe = self._call(probe_images(), "the probe images")
        except EncoderOutputError:
            raise
        except Exception as err:     # the user's code raised: say so in one line (the cause is chained)
            raise EncoderSpecError(f"encoder {name!r} failed on the two probe images (64x64 RGB PIL): "
                                   f"{type(err).__name__}: {one_line(err)}") from err
        self.embed_dim = int(probe.shape[1])
        h = hashlib.sha1(name.encode())
        h.update(np.round(probe.astype(np.float64), 4).tobytes())
        self.fingerprint = h.hexdigest()[:16]

    def _call(self, images: list[Image.Image], what: str) -> np.ndarray:
        out = self.fn(images)
        if isinstance(out, torch.Tensor):
            out = out.detach().float().cpu().numpy()
        out = np.asarray(out, dtype=np.float32)
        n = len(images)
        if out.ndim != 2 or out.shape[0] != n:
            raise EncoderOutputError(f"encoder {self.name!r} returned shape {tuple(out.shape)} for {what} "
                                     f"({n} images); expected one row per image, [{n}, D]")
        if not np.isfinite(out).all():
            raise EncoderOutputError(f"encoder {self.name!r} returned non-finite values (NaN/inf) for {what}")
        if (np.linalg.norm(out, axis=1) == 0).any():
            raise EncoderOutputError(f"encoder {self.name!r} returned an all-zero embedding for {what}; "
                                     f"cosine similarity is undefined for it")
        return out

    def cache_key(self) -> str:
        """Key of the embeddings it produces (FPR's embedding cache reads it)."""
        return f"user:{self.name}|fp={self.fingerprint}"

    @torch.no_grad()
    def embed(self, images: Sequence[Any], batch_size: int = 32, progress: bool = False) -> torch.Tensor:
        """L2-normalised embeddings [N, D] of images (paths, PIL, arrays, tensors), in batches."""
        images = as_sequence(images)                   # decoded batch by batch
        starts = range(0, len(images), batch_size)
        if progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=f"embed ({self.name})", unit="batch")
        rows = [self._call(load_images(images[i:i + batch_size], start=i),
                           f"images {i}..{min(i + batch_size, len(images)) - 1}") for i in starts]
        if not rows:
            return torch.zeros(0, self.embed_dim)
        return F.normalize(torch.from_numpy(np.concatenate(rows)), dim=-1)


def _offline_hint(ident: str, err: Exception) -> OSError:
    return OSError(f"encoder {ident!r}: cannot load its weights ({type(err).__name__}: {str(err)[:200]}). "
                   f"They come from the Hugging Face hub (paper profile): run once with hub access "
                   f"(HF_HUB_OFFLINE unset) to fill the cache, or pass a local model folder, or a "
                   f"callable list[PIL] -> [N, D] that wraps your loaded model.")


def _stack(images, transform) -> torch.Tensor:
    return torch.stack([transform(im) for im in images])


def hub_encoder(ident: str, device: str = "cpu", **kw: Any) -> Callable[[list[Image.Image]], torch.Tensor]:
    """A callable for a timm / open_clip / transformers identifier (see the module docstring).
    ``kw`` go to the model constructor (e.g. ``pretrained=False`` for a random-init timm model)."""
    try:
        if ident.startswith("timm:"):
            import timm

            model = timm.create_model(ident[5:], pretrained=kw.pop("pretrained", True), num_classes=0, **kw)
            model.eval().to(device)
            cfg = timm.data.resolve_model_data_config(model)
            tf = timm.data.create_transform(**cfg, is_training=False)
            return lambda ims: model(_stack(ims, tf).to(device))
        if ident.startswith(("open_clip:", "hf-hub:")):
            import open_clip

            name = ident if ident.startswith("hf-hub:") else ident[len("open_clip:"):]
            arch, _, tag = name.partition(":") if not name.startswith("hf-hub:") else (name, "", "")
            model, _, pre = open_clip.create_model_and_transforms(arch, pretrained=tag or None, **kw)
            model.eval().to(device)
            return lambda ims: model.encode_image(_stack(ims, pre).to(device))
        from transformers import AutoImageProcessor, AutoModel

        proc = AutoImageProcessor.from_pretrained(ident)
        model = AutoModel.from_pretrained(ident, **kw).eval().to(device)
    except (OSError, RuntimeError, ValueError) as err:
        if isinstance(err, OSError) or "hub" in str(err).lower() or "offline" in str(err).lower():
            raise _offline_hint(ident, err) from err
        raise

    def transformers_embed(ims):
        pix = proc(images=list(ims), return_tensors="pt")["pixel_values"].to(device)
        if hasattr(model, "get_image_features"):
            out = model.get_image_features(pixel_values=pix)
            return getattr(out, "pooler_output", out)
        out = model(pixel_values=pix)
        pooled = getattr(out, "pooler_output", None)
        return pooled if pooled is not None else out.last_hidden_state[:, 0]

    return transformers_embed


def _label(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return "callable" if "<lambda>" in name else name


def as_user_encoder(encoder: Any, name: str | None = None, device: str = "cpu", **kw: Any) -> UserEncoder:
    """A :class:`UserEncoder` for a callable, a hub identifier or a ``module:attribute`` string."""
    if isinstance(encoder, UserEncoder):
        return encoder
    if isinstance(encoder, (str, os.PathLike)):
        ident = str(encoder)
        got = import_spec(ident)
        fn = got[1] if got is not None else hub_encoder(ident, device=device, **kw)
        return UserEncoder(fn, name or ident)
    if not callable(encoder):
        raise TypeError(f"encoder must be a registered name, a hub identifier or a callable "
                        f"list[PIL] -> [N, D]; got {type(encoder).__name__}")
    return UserEncoder(encoder, name or _label(encoder))


# --------------------------------------------------------------------------- resolve before working
@dataclass
class ResolvedEncoder:
    """What an encoder argument resolved to, loaded and probed: ``how`` is ``"callable"``,
    ``"module"``, ``"file"``, ``"registered"``, ``"timm"``, ``"open_clip"`` or ``"hub"``; ``model`` is
    a library :class:`~nearid_lib.models.Encoder` (registered; ``canon`` its name) or a
    :class:`UserEncoder`; ``label`` names it in tables and figures."""

    spec: str
    how: str
    label: str
    model: Any
    canon: str | None = None


_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def _registered_names() -> tuple[list[str], Callable[[str], str]]:
    from .models import encoder_aliases, list_encoders, resolve_name

    return sorted({*list_encoders(), *encoder_aliases()}), resolve_name


def _probe_library_encoder(spec: str, model: Any) -> None:
    try:
        out = model.embed(probe_images())
    except Exception as err:
        raise EncoderSpecError(f"encoder {spec!r} failed on the two probe images: {type(err).__name__}: "
                               f"{one_line(err)}") from err
    out = out.detach().float().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float32)
    if out.ndim != 2 or out.shape[0] != 2 or not np.isfinite(out).all():
        raise EncoderOutputError(f"encoder {spec!r} returned shape {tuple(out.shape)} (or non-finite values) "
                                 f"for the two probe images; expected [2, D]")


def _hub(spec: str, what: str, device: str, kw: dict) -> Callable:
    try:
        return hub_encoder(spec, device=device, **kw)
    except OSError as err:
        raise OSError(f"{one_line(err, 600)} [read as {what}]") from err
    except Exception as err:            # e.g. timm's "Unknown model", open_clip's unknown architecture
        raise EncoderSpecError(f"encoder {spec!r} (read as {what}) failed to load: {type(err).__name__}: "
                               f"{one_line(err)}") from err


def resolve_encoder(encoder: Any, *, name: str | None = None, device: str = "cpu",
                    loader: Callable[..., Any] | None = None, encoder_kw: dict | None = None,
                    probe: bool = True) -> ResolvedEncoder:
    """Resolve, load and probe an encoder argument **before** any data is built, so a wrong
    argument fails in seconds.

    A string is read, in this order of precedence, as

    1. a module path ``package.module:function`` (the current folder is searched too);
    2. a file path ``path/to/file.py:function``;
    3. a registered name (:func:`nearid_lib.models.list_encoders`, aliases included), loaded with
       ``loader(name, **encoder_kw)`` (default :func:`~nearid_lib.models.load_encoder`);
    4. ``timm:<model>``, ``open_clip:<arch>[:<tag>]`` or ``hf-hub:<repo>`` (these prefixes are
       never module paths);
    5. a Hugging Face hub id ``org/repo`` or a local model folder.

    A callable is wrapped as it is. Every failure is an :class:`EncoderSpecError` (or the hub's
    ``OSError``) whose one-line message lists what was tried; the loaded encoder then embeds two
    small probe images (``probe=False`` skips that for registered encoders)."""
    kw = dict(encoder_kw or {})
    if isinstance(encoder, UserEncoder):
        return ResolvedEncoder(encoder.name, "callable", name or encoder.name, encoder)
    if not isinstance(encoder, (str, os.PathLike)):
        if not callable(encoder):
            raise EncoderSpecError(f"encoder must be a name, 'module:function', 'file.py:function', a hub id or a "
                                   f"callable list[PIL] -> [N, D]; got {type(encoder).__name__}")
        ue = UserEncoder(encoder, name or _label(encoder))
        return ResolvedEncoder(ue.name, "callable", ue.name, ue)
    spec = str(encoder)
    if not spec.strip():
        raise EncoderSpecError("encoder: empty name")
    got = import_spec(spec)                                               # 1-2
    if got is not None:
        ue = UserEncoder(got[1], name or spec)
        return ResolvedEncoder(spec, got[0], ue.name, ue)
    names, resolve_name = _registered_names()
    if ":" not in spec and spec in names:                                 # 3
        canon = resolve_name(spec)
        if loader is None:
            from .models import load_encoder as loader
        try:
            model = loader(canon, **kw)
        except (OSError, ValueError, KeyError):         # the library's own messages (offline, no checkpoint)
            raise
        except Exception as err:                         # e.g. a keyword this encoder does not take
            what = "a registered name" if canon == spec else f"registered as {canon!r}"
            raise EncoderSpecError(f"encoder {spec!r} ({what}) failed to load: {type(err).__name__}: "
                                   f"{one_line(err)}") from err
        model = model[0] if isinstance(model, tuple) else model
        if probe:
            _probe_library_encoder(spec, model)
        return ResolvedEncoder(spec, "registered", name or spec, model, canon)
    prefix = spec.split(":", 1)[0] if ":" in spec else ""
    if prefix in HUB_PREFIXES:                                            # 4
        ue = UserEncoder(_hub(spec, f"a {prefix}: identifier", device, kw), name or spec)
        return ResolvedEncoder(spec, "open_clip" if prefix == "hf-hub" else prefix, ue.name, ue)
    local = Path(spec).expanduser()
    if local.is_dir() or (_HUB_ID_RE.match(spec) and not local.exists()):   # 5
        what = "a local model folder" if local.is_dir() else \
            "a Hugging Face hub id (it is no module path, file path or registered name)"
        ue = UserEncoder(_hub(spec, what, device, kw), name or spec)
        return ResolvedEncoder(spec, "hub", ue.name, ue)
    close = difflib.get_close_matches(spec, names, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
    raise EncoderSpecError(
        f"unknown encoder {spec!r}{hint}; tried: module path (needs 'package.module:function'), file path "
        f"(needs 'file.py:function'), registered name (valid: {', '.join(names)}), timm:/open_clip:/hf-hub: "
        f"prefix (none), hub id (needs 'org/repo' or a local model folder)")
