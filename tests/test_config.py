"""Typed profiles: building, serialising, loud unknown keys, typed overrides (code, environment)."""
from __future__ import annotations

import json

import pytest

from nearid_lib import config as C


@pytest.mark.parametrize("name", ["smoke", "mini", "paper"])
def test_profiles_build_and_serialise(name):
    prof = C.get_profile(name)
    assert prof.name == name
    d = prof.to_dict()
    assert json.loads(json.dumps(d))["name"] == name
    assert set(d) >= {"world", "backbone", "head", "train", "eval", "generate", "retrieval", "idsim"}


def test_unknown_profile_names_valid_ones():
    with pytest.raises(C.ConfigError) as e:
        C.get_profile("medium")
    assert "smoke" in str(e.value) and "mini" in str(e.value) and "paper" in str(e.value)


def test_unknown_key_names_valid_fields():
    with pytest.raises(C.ConfigError) as e:
        C.get_profile("mini", **{"train.learning_rate": 1.0})
    msg = str(e.value)
    assert "learning_rate" in msg and "lr" in msg and "weight_decay" in msg
    with pytest.raises(C.ConfigError) as e:
        C.get_profile("mini", **{"nosection.x": 1})
    assert "world" in str(e.value)
    with pytest.raises(C.ConfigError):
        C.get_profile("mini", **{"train": 3})  # a section, not a value


def test_overrides_are_typed_from_strings():
    prof = C.get_profile("mini", overrides={"train.lr": "0.5", "train.epochs": "3",
                                            "train.augment": "false",
                                            "eval.encoders": "a,b"})
    assert prof.train.lr == 0.5 and isinstance(prof.train.lr, float)
    assert prof.train.epochs == 3 and prof.train.augment is False
    assert prof.eval.encoders == ("a", "b")
    # the base profile is untouched (frozen dataclasses, fresh per call)
    assert C.get_profile("mini").train.augment is True
    with pytest.raises(C.ConfigError):
        C.get_profile("mini", **{"train.augment": "maybe"})


def test_profiles_differ_in_size_not_shape():
    s, m, p = (C.get_profile(n) for n in ("smoke", "mini", "paper"))
    assert s.world.n_train_ids < m.world.n_train_ids
    assert s.backbone.tiny and not m.backbone.tiny and not p.backbone.tiny
    assert p.world.source == "released" and m.world.source == "procedural"
    assert p.backbone.name.startswith("siglip2")


def test_runtime_section_is_set_by_the_environment_when_the_profile_is_built(monkeypatch):
    """NEARID_WORKERS / NEARID_THREADS (else OMP_NUM_THREADS) set ``runtime`` once, in get_profile;
    NEARID_SET and explicit overrides win; without them: one worker, every core (threads None).
    Without portable numerics, that is (NEARID_PORTABLE=0; under them one thread:
    tests/test_portable_numerics.py)."""
    for var in ("NEARID_WORKERS", "NEARID_THREADS", "OMP_NUM_THREADS", "NEARID_SET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NEARID_PORTABLE", "0")
    native = {"NEARID_PORTABLE": "0"}
    prof = C.get_profile("smoke")
    assert prof.runtime.workers == 1 and prof.runtime.threads is None
    assert prof.to_dict()["runtime"] == {"workers": 1, "threads": None, "tune_malloc": True}
    assert C.runtime_env(native) == {} and C.runtime_env({**native, "NEARID_THREADS": " "}) == {}
    assert C.runtime_env({**native, "OMP_NUM_THREADS": "3"}) == {"runtime.threads": 3}
    assert C.runtime_env({**native, "NEARID_THREADS": "1", "OMP_NUM_THREADS": "3", "NEARID_WORKERS": "2"}) == {
        "runtime.workers": 2, "runtime.threads": 1}
    for bad in ({"NEARID_THREADS": "many"}, {"NEARID_WORKERS": "0"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            C.runtime_env(bad)
    monkeypatch.setenv("NEARID_WORKERS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    prof = C.get_profile("mini")
    assert (prof.runtime.workers, prof.runtime.threads) == (2, 3)
    monkeypatch.setenv("NEARID_THREADS", "1")
    assert C.get_profile("paper").runtime.threads == 1
    monkeypatch.setenv("NEARID_SET", "runtime.workers=3")
    assert C.get_profile("mini").runtime.workers == 3
    assert C.get_profile("mini", **{"runtime.workers": 4}).runtime.workers == 4
    for key, value in (("runtime.threads", "many"), ("runtime.workers", 0), ("runtime.threads", 0)):
        with pytest.raises(C.ConfigError, match=key):
            C.get_profile("mini", **{key: value})


def test_env_overrides_apply_typed_and_loud(monkeypatch):
    monkeypatch.setenv("NEARID_SET", "world.source=released; train.max_steps=7\n train.augment=false")
    prof = C.get_profile("smoke")
    assert prof.world.source == "released" and prof.train.max_steps == 7 and prof.train.augment is False
    # explicit overrides win over the environment
    assert C.get_profile("smoke", **{"train.max_steps": 2}).train.max_steps == 2
    monkeypatch.setenv("NEARID_SET", "train.max_steps=none")
    assert C.get_profile("smoke").train.max_steps is None
    monkeypatch.setenv("NEARID_SET", "train.nope=1")
    with pytest.raises(C.ConfigError, match="nope"):
        C.get_profile("smoke")
    monkeypatch.setenv("NEARID_SET", "world.source")
    with pytest.raises(C.ConfigError, match="key=value"):
        C.get_profile("smoke")
