"""What a reused result is keyed by (``nearid_lib.runtime.code_closure``): the modules its code reaches,
found by following the code. Checked on the library's own keys: the token store's and a trained
run's code follow the modules that make them, and an edit of an unrelated module keeps both."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import nearid_lib
from nearid_lib.runtime.code_closure import code_closure
from nearid_lib.nearid import checkpoints as ck
from nearid_lib.runtime.runmeta import code_fingerprint

PKG = Path(nearid_lib.__file__).parent


def test_follows_globals_lazy_imports_and_registries():
    from nearid_lib.data.released import load_released_from_hub
    from nearid_lib.features.embed import embed

    c = code_closure(load_released_from_hub)
    # `from .. import hub` and `from .masks import ObjectMasker` sit inside the function
    assert {"data/released.py", "hub/__init__.py", "data/masks.py", "data/released_identities.py",
            "data/released_masks.py"} <= set(c)
    # embed reaches the payload functions through the PAYLOADS registry (a dict of functions)
    assert {"features/embed.py", "features/store.py", "features/variants.py"} <= set(code_closure(embed))
    assert "features/cache.py" not in code_closure(embed)


def test_a_module_root_stands_for_what_it_defines():
    assert "nearid/losses/registry.py" in code_closure("nearid_lib.nearid.train")
    assert code_closure("nearid_lib.io_utils") == ["io_utils.py"]


def test_store_and_run_keys_leave_unrelated_code_out():
    from nearid_lib.features.embed import embed
    from nearid_lib.features.layouts import ShardGrids
    from nearid_lib.features.shards import ShardedTokenStore
    from nearid_lib.features.variants import apply_variant

    store = set(code_closure(ShardedTokenStore, ShardGrids, embed, apply_variant))
    assert "features/shards.py" in store
    assert not any(m.startswith(("nearid/", "idsim/", "fpr/", "data/")) for m in store), store
    train = set(code_closure(*ck.TRAINING_ROOTS))
    assert {"nearid/losses/registry.py", "nearid/train.py", "models/map_head.py", "features/shards.py"} <= train
    # claims/__init__.py (how claims are judged) is not what a run is made of: the runs build Evidence
    # (claims/evidence.py) and its statistics (stats.py) only, so editing a claim's interval reuses every head
    unrelated = {"report.py", "paper_specs.py", "nearid/tables.py", "data/released.py", "data/world.py",
                 "cross_paper.py", "plots/charts.py", "plots/style.py", "claims/__init__.py", "claims/criteria.py",
                 "nearid/claims.py"}
    assert {"claims/evidence.py", "stats.py"} <= train
    assert not train & unrelated
    assert not any(m.startswith(("idsim/", "fpr/", "generate/", "judge/")) for m in train)


@pytest.fixture(scope="module")
def pkg_copy(tmp_path_factory):
    d = tmp_path_factory.mktemp("pkg") / "nearid_lib"
    shutil.copytree(PKG, d, ignore=shutil.ignore_patterns("__pycache__"))
    return d


def test_an_edit_on_the_path_rekeys_and_an_edit_elsewhere_does_not(pkg_copy):
    mods = code_closure(*ck.TRAINING_ROOTS)
    before = code_fingerprint(*mods, package=pkg_copy)
    with open(pkg_copy / "report.py", "a") as f:                 # off the training path
        f.write("\n# an edit of the report\n")
    assert code_fingerprint(*mods, package=pkg_copy) == before
    # on it: a loss the training code reaches only through the loss registry
    with open(pkg_copy / "nearid" / "losses" / "circle.py", "a") as f:
        f.write("\n# an edit of a loss\n")
    assert code_fingerprint(*mods, package=pkg_copy) != before
