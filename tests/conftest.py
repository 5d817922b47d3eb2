"""Shared fixtures. The smoke world is built once per test session into a temporary folder
(a few seconds), so tests never depend on what a notebook run left in ``data/``."""
from __future__ import annotations

import os

# Portable numerics (nearid_lib.runtime) in every test process, whatever machine runs it: numpy and
# torch read their code paths when they load, so they are set here, before any test module imports
# them (a GPU machine's `make test` exports NEARID_PORTABLE=0: kept). The digests of
# tests/test_portable_numerics.py are computed in a process of their own, portable whatever this is.
os.environ.setdefault("NEARID_PORTABLE", "1")
import nearid_lib  # noqa: E402,F401  (its import applies the setting)

import pytest  # noqa: E402

# cuBLAS reads its workspace setting when a process first uses it: set before any test touches CUDA,
# so tests that switch nearid_lib.runtime.deterministic on are exact on a GPU too (no effect on CPU)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


# The edit-test loop (`make test-fast`) leaves out the tests whose cost is a world build, process
# launches or notebook runs: those using a world fixture, and the modules of launches, installs and
# end-to-end runs below. `make test` runs everything.
HEAVY_FIXTURES = frozenset({"smoke_world", "train_world", "fresh_clone"})
HEAVY_MODULES = frozenset({
    "test_released_parallel", "test_nearid_sweep", "test_gpu_suite", "test_multiprocess", "test_nearid_distributed",
    "test_wheelhouse", "test_launch_timeout", "test_portable_numerics", "test_cpu_probe", "test_generate_runner",
    "test_prefill_step", "test_cli_validation", "test_score", "test_score_card", "test_score_fast", "test_nearid_group",
    "test_readme", "test_nearid_evaluate", "test_released_pipeline", "test_run_notebook", "test_models_encoders",
    "test_nearid_train", "test_code_closure", "test_fpr_generation", "test_fpr_bg_removal",
})
# single tests of otherwise quick modules that build a world, start an interpreter or kill a writer
HEAVY_TESTS = frozenset({"test_a_notebook_opened_after_nearid_score_builds_the_world_it_needs",
                         "test_idsim_is_registered_from_its_package_and_the_core_imports_none",
                         "test_sigkill_mid_write_resumes"})


def pytest_collection_modifyitems(config, items):
    """Mark the heavy tests (:data:`HEAVY_FIXTURES`, :data:`HEAVY_MODULES`, :data:`HEAVY_TESTS`) ``heavy``."""
    for item in items:
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        if (module in HEAVY_MODULES or item.name.split("[")[0] in HEAVY_TESTS
                or HEAVY_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.heavy)


@pytest.fixture(scope="session", autouse=True)
def _outputs_outside_the_checkout(tmp_path_factory):
    """Every test's feature caches and build outputs (``NEARID_CACHE``, ``NEARID_OUT``) go to a
    folder of this session, never into the checkout's ``cache/`` and ``build/``, where ``make smoke``
    and ``make reproduce`` write; a test that needs fresh ones still sets its own (monkeypatch), and
    a variable set before the session is kept."""
    root = tmp_path_factory.mktemp("outputs")
    with pytest.MonkeyPatch.context() as mp:
        for var, sub in (("NEARID_CACHE", "cache"), ("NEARID_OUT", "build")):
            if not os.environ.get(var):
                mp.setenv(var, str(root / sub))
        yield root


@pytest.fixture(scope="session")
def smoke_world(tmp_path_factory):
    """``NearIDData`` of the smoke profile's world, built fresh for this session."""
    from nearid_lib.config import get_profile
    from nearid_lib.data import build_world, load_nearid

    root = build_world(get_profile("smoke"), root=tmp_path_factory.mktemp("smoke") / "nearid",
                       progress=False)
    return load_nearid(root)


@pytest.fixture(scope="module")
def train_world(smoke_world, tmp_path_factory):
    """The session's smoke world (:func:`smoke_world`: training reads it and writes nothing into it)
    plus a token-cache folder private to the module: ``(profile, NearIDData, cache_root)`` for the
    training tests."""
    from nearid_lib.config import get_profile

    return get_profile("smoke"), smoke_world, tmp_path_factory.mktemp("world") / "cache"


@pytest.fixture(scope="module")
def tiny_lite0():
    """The tiny random-init EfficientNet-Lite0 at a fixed init (torch seed 0)."""
    import torch

    from nearid_lib.models import load_encoder

    torch.manual_seed(0)
    return load_encoder("efficientnet-lite0", tiny=True)[0]


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """A fresh clone's output folders in ``tmp_path`` (data, cache, build, figures through the
    ``NEARID_*`` variables), no ``NEARID_SET`` overrides, cwd = ``tmp_path``; returns ``tmp_path``."""
    for var, sub in (("NEARID_DATA", "data"), ("NEARID_CACHE", "cache"), ("NEARID_OUT", "build"),
                     ("NEARID_FIGURES", "figures")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.delenv("NEARID_SET", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def clean_hub(monkeypatch):
    """No hub mirror set and no reads recorded, before and after the test (the hub tests ask for it
    with ``pytestmark = pytest.mark.usefixtures("clean_hub")``)."""
    from nearid_lib import hub

    monkeypatch.delenv(hub.HUB_DIR_ENV, raising=False)
    hub.clear_reads()
    yield
    hub.clear_reads()
