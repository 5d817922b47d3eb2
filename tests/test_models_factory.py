"""The one encoder factory (``nearid_lib.models.load_encoder``): every kind of encoder argument, the
``@random`` suffix, the per-process cache, a profile's way of loading, and ID-Sim registered from
its own package through the entry point (the core imports no paper package)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from nearid_lib.config import get_profile
from nearid_lib.models import (UserEncoder, clear_encoder_cache, encoder_kind, load_backbone, load_encoder,
                               resolve_encoder)


def _state(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_random_suffix_is_the_weights_keyword():
    a = load_encoder("efficientnet-lite0@random", tiny=True)[0]
    b = load_encoder("efficientnet-lite0", tiny=True, weights="random")[0]
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert encoder_kind("efficientnet-lite0@random") == "registered"


def test_callables_and_module_specs_are_wrapped(tmp_path):
    fn = lambda ims: np.ones((len(ims), 3)) * np.arange(1, 4)          # noqa: E731
    model, pre = load_encoder(fn, name="mine")
    assert isinstance(model, UserEncoder) and pre is None and model.name == "mine"
    f = tmp_path / "enc.py"
    f.write_text("import numpy as np\ndef embed(images):\n    return np.ones((len(images), 2))\n")
    model, _ = load_encoder(f"{f}:embed")
    assert isinstance(model, UserEncoder) and model.embed_dim == 2
    assert encoder_kind(fn) == "callable" and encoder_kind("timm:resnet18") == "timm"


def test_cache_returns_one_model_per_arguments_until_cleared():
    a = load_encoder("efficientnet-lite0", tiny=True, cache=True)[0]
    assert load_encoder("efficientnet-lite0", tiny=True, cache=True)[0] is a
    assert load_encoder("efficientnet-lite0", tiny=True)[0] is not a          # no cache asked
    clear_encoder_cache()
    assert load_encoder("efficientnet-lite0", tiny=True, cache=True)[0] is not a


def test_profile_loads_a_registered_name_as_load_backbone_does():
    cfg = get_profile("smoke")
    a = load_encoder(cfg.backbone.name, profile=cfg, device=None)[0]
    b = load_backbone(cfg)[0]
    assert a.cache_key() == b.cache_key() and a.tiny == cfg.backbone.tiny
    res = resolve_encoder(cfg.backbone.name, profile=cfg, device=None)
    assert res.how == "registered" and res.model.cache_key() == b.cache_key()


def test_idsim_is_registered_from_its_package_and_the_core_imports_none():
    code = ("import sys; import nearid_lib.models as m; "
            "assert 'nearid_lib.idsim' not in sys.modules, 'the core imported ID-Sim'; "
            "names = m.list_encoders(); assert {'idsim', 'idsim-release'} <= set(names), names; "
            "assert 'nearid_lib.idsim.encoders' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_unknown_spec_lists_what_was_tried():
    with pytest.raises(ValueError, match=r"unknown encoder 'efficientnet-lite9' \(did you mean"):
        load_encoder("efficientnet-lite9")


def test_registry_describes_a_group_its_availability_and_its_seeds(tmp_path, monkeypatch):
    """What a caller above the core asks of a name without building it (issue 54: the cross-paper
    table finds ID-Sim's released rows this way): the names of a group in registration order, the
    label, the reason its weights cannot be read, and a checkpoint folder's seeds."""
    from nearid_lib.models import registry as R

    monkeypatch.setattr(R, "_REGISTRY", dict(R._REGISTRY))
    build = lambda **kw: None                                                     # noqa: E731
    R.register_encoder("zz-b", build, "org/b", label="B", group="test-group", available=lambda: "b is absent")
    R.register_encoder("zz-a", build, "org/a", label="A", group="test-group",
                       seeds=lambda d: (int((d / "own").read_text()), [0, 1, 2]))
    assert R.list_encoders(group="test-group") == ["zz-b", "zz-a"]            # registration order
    assert R.encoder_info("zz-b") == R.EncoderInfo("zz-b", "org/b", "", "B", "test-group")
    assert R.encoder_available("zz-b") == "b is absent" and R.encoder_available("zz-a") is None
    (tmp_path / "own").write_text("2")
    assert R.checkpoint_seeds("zz-a", tmp_path) == (2, [0, 1, 2])
    assert R.checkpoint_seeds("zz-b", tmp_path) == (0, [0])                     # no hook: one seed
    # ID-Sim's releases are one group, the paper's first; absent from an empty mirror, with the reason
    assert R.list_encoders(group="idsim-release")[0] == "idsim-release"
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path / "empty-mirror"))
    (tmp_path / "empty-mirror").mkdir()
    why = R.encoder_available("idsim-release")
    assert why is not None and "chaenayo/id-sim_dinov3_vitl16_cls_patch" in why
