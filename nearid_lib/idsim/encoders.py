"""ID-Sim's encoders in the library's one registry, registered from here (the core knows nothing of
ID-Sim): ``load_encoder("idsim", checkpoint=...)`` (a model trained by notebook 09, or a fresh one)
and ``load_encoder("idsim-release")`` (the authors' released model).

:func:`register` is this package's entry point in the group ``nearid.encoders``
(``pyproject.toml``); :mod:`nearid_lib.models.registry` calls it the first time a name is looked up.
"""
from __future__ import annotations

from ..models.registry import register_encoder
from .model import checkpoint_seed_list, idsim_encoder
from .release_backbones import RELEASES
from .release_model import release_available, release_encoder

__all__ = ["register"]


def _idsim(name, hub_id, tiny=False, **kw):
    return idsim_encoder(tiny=tiny, **kw)


def _idsim_release(name, hub_id, tiny=False, **kw):
    return release_encoder(tiny=tiny, hub_id=hub_id, name=name, **kw)


def register() -> None:
    """Add ``idsim`` and the released checkpoints (``idsim-release`` and its three other backbones,
    :data:`~.release_backbones.RELEASES`, the group ``"idsim-release"`` with a check that their weights
    are in the mirror) to the encoder registry."""
    register_encoder("idsim", _idsim, None, doc="ID-Sim: frozen backbone + LoRA + CLS/patch heads "
                     "(nearid_lib.idsim.model)", label="ID-Sim", seeds=checkpoint_seed_list)
    for spec in RELEASES.values():
        register_encoder(spec.name, _idsim_release, spec.repo,
                         doc=f"the released {spec.label}: its LoRA merged into {spec.base} + mlp_cls / mlp_patch, "
                             f"448 px (nearid_lib.idsim.release_model; checkpoint=, base=, image_size=)",
                         label=spec.label, group="idsim-release",
                         available=lambda s=spec: release_available(s.repo, s.base))
