"""Validate before working (issue 25, item 1): every encoder argument is resolved, loaded and
probed before any data is built. Strings are read as a module path, a file path, a registered
name, a timm:/open_clip: identifier, then a hub id; a wrong one exits the command with status 2
and one line listing what was tried, in seconds, and no data folder appears."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from nearid_lib.models import EncoderOutputError, EncoderSpecError, resolve_encoder

ROOT = Path(__file__).resolve().parents[1]

ENC = "import numpy as np\ndef embed(images):\n    return np.ones((len(images), 3)) + np.arange(len(images))[:, None]\n"


def _write_encoders(d: Path) -> Path:
    """The user encoders of the tests (good, broken and failing ones) in folder ``d``."""
    (d / "enc_file.py").write_text(ENC)
    (d / "enc_pkg").mkdir()
    (d / "enc_pkg" / "__init__.py").write_text("")
    (d / "enc_pkg" / "encoders.py").write_text(ENC + "NOT_CALLABLE = 3\n")
    (d / "enc_broken.py").write_text("import no_such_dependency_xyz\n")
    (d / "enc_raises.py").write_text("def embed(images):\n    raise RuntimeError('shapes do not match')\n")
    (d / "enc_boom.py").write_text("raise RuntimeError('no GPU here')\n")        # fails when run
    (d / "enc_badpkg").mkdir()                                       # a package whose __init__ fails
    (d / "enc_badpkg" / "__init__.py").write_text("import no_such_dependency_xyz\n")
    (d / "enc_badpkg" / "mod.py").write_text(ENC)
    return d


@pytest.fixture
def clone(fresh_clone, tmp_path, monkeypatch):
    """Empty data/cache/build folders of a fresh clone in tmp, cwd = tmp, with user encoders in it."""
    _write_encoders(tmp_path)
    yield tmp_path
    for mod in ("enc_pkg", "enc_pkg.encoders", "enc_file", "enc_once"):
        sys.modules.pop(mod, None)


def _cli(clone, *argv, env=None):
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "nearid_lib", *argv], cwd=clone, env=env or dict(os.environ),
                         capture_output=True, text=True, timeout=300)
    return res, time.perf_counter() - t0


BAD = [
    (["score", "file.py:nope"], r"encoder 'file.py:nope' names no callable; tried module path: no module "
                                r"'file' on sys.path .*; file path: no file 'file.py'; registered name, hub id: "
                                r"not tried \(neither contains ':'\)$"),
    (["score", "no_such_pkg.mod:fn"], r"encoder 'no_such_pkg.mod:fn' names no callable; tried module path: no "
                                      r"module 'no_such_pkg' on sys.path .*; file path: 'no_such_pkg.mod' does "
                                      r"not end in .py; registered name, hub id: not tried"),
    (["score", "enc_pkg.nothing_here:embed"], r"tried module path: package 'enc_pkg' has no module 'nothing_here'"),
    (["score", "enc_file.py:nope"], r"encoder 'enc_file.py:nope': file 'enc_file.py' has no attribute 'nope'; "
                                    r"its callables: embed$"),
    (["score", "my_package.encoders:embed"], r"encoder 'my_package.encoders:embed' names no callable; tried module "
                                             r"path: no module 'my_package' .*does not end in .py; registered"),
    (["score", "enc_pkg.encoders:nope"], r"module 'enc_pkg.encoders' has no attribute 'nope'"),
    (["score", "enc_pkg.encoders:NOT_CALLABLE"], r"NOT_CALLABLE in module 'enc_pkg.encoders' is not callable \(int\)"),
    (["score", "enc_broken:embed"], r"importing module 'enc_broken' failed: ModuleNotFoundError: No module named "
                                    r"'no_such_dependency_xyz'"),
    # a file that fails when run: one line, status 2 (it was a traceback with status 1: looking for a
    # module path 'enc_boom.py' imported enc_boom.py as module 'enc_boom' outside any error handling)
    (["score", "enc_boom.py:embed"], r"encoder 'enc_boom.py:embed': running file 'enc_boom.py' failed: "
                                     r"RuntimeError: no GPU here$"),
    (["score", "enc_badpkg.mod:embed"], r"encoder 'enc_badpkg.mod:embed': importing package 'enc_badpkg' failed: "
                                        r"ModuleNotFoundError: No module named 'no_such_dependency_xyz'$"),
    (["score", "enc_raises.py:embed"], r"encoder 'enc_raises.py:embed' failed on the two probe images .*RuntimeError: "
                                       r"shapes do not match$"),
    (["score", "efficientnet-lite00"], r"unknown encoder 'efficientnet-lite00' \(did you mean 'efficientnet-lite0'.*"
                                       r"registered name \(valid: .*frozen-gap.*hub id \(needs 'org/repo'"),
    (["score", "timm:no_such_model_xyz"], r"'timm:no_such_model_xyz' \(read as a timm: identifier\) failed to load: "
                                          r"RuntimeError: Unknown model"),
    (["score", "nobody-here/no-such-model"], r"encoder 'nobody-here/no-such-model': cannot load its weights .*"
                                             r"\[read as a Hugging Face hub id \(it is no module path, file path or "
                                             r"registered name\)\]$"),
    (["score", "nearid"], r"nearid: cannot load the head 'Aleksandar/nearid-siglip2'"),   # mini: no head, offline
    (["score", "efficientnet-lite0", "--checkpoint", "x.safetensors"],       # a keyword the encoder does not take
     r"encoder 'efficientnet-lite0' \(a registered name\) failed to load: TypeError: .*'checkpoint'$"),
    (["rank", "no/gen.csv", "no/gallery.csv", "--encoder", "clip-vit-b3"],
     r"unknown encoder 'clip-vit-b3' \(did you mean 'clip-vit-b32'"),
]


# Cases run as a command in a fresh process (exit status, stderr, no traceback as a user sees them):
# the first, the file that fails when run (once a traceback with status 1), and the other command.
# The rest call the same entry point, nearid_lib.cli.main, in this process: the same code from the
# command line on, without paying a Python start and a torch import each (~13 s of CI time a case).
IN_FRESH_PROCESS = (0, 8, len(BAD) - 1)


def _folders(d: Path) -> dict[str, str]:
    return {v: str(d / sub) for v, sub in (("NEARID_DATA", "data"), ("NEARID_CACHE", "cache"),
                                           ("NEARID_OUT", "build"), ("NEARID_FIGURES", "figures"))}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """The commands of ``IN_FRESH_PROCESS``, each in a fresh clone of its own (own folders, own
    encoder files, a fresh process), two at a time (the machines that run the suite have two cores)."""
    def run(i):
        d = _write_encoders(tmp_path_factory.mktemp(f"bad{i}"))
        env = {**os.environ, **_folders(d)}
        env.pop("NEARID_SET", None)
        return i, (*_cli(d, *BAD[i][0], env=env), d)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, IN_FRESH_PROCESS))


def _in_process(d: Path, argv: list[str], monkeypatch, capsys):
    """``nearid ARGV`` through :func:`nearid_lib.cli.main` in this process, cwd ``d`` with its own
    folders: (a CompletedProcess-like record, seconds)."""
    from nearid_lib.cli import main

    for k, v in _folders(d).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("NEARID_SET", raising=False)
    monkeypatch.chdir(d)
    capsys.readouterr()
    t0 = time.perf_counter()
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    took = time.perf_counter() - t0
    for mod in [m for m in sys.modules if m.split(".")[0] in ("enc_pkg", "enc_file", "enc_once", "enc_broken",
                                                               "enc_badpkg", "enc_raises", "enc_boom")]:
        sys.modules.pop(mod, None)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, rc, out.out, out.err), took


@pytest.mark.parametrize("case", range(len(BAD)), ids=[" ".join(a[:2]) for a, _ in BAD])
def test_bad_encoder_exits_2_in_seconds_before_any_data(bad_runs, case, tmp_path, monkeypatch, capsys):
    argv, pattern = BAD[case]
    if case in bad_runs:
        res, took, clone = bad_runs[case]
    else:
        clone = tmp_path / "clone"
        clone.mkdir()
        _write_encoders(clone)
        res, took = _in_process(clone, argv, monkeypatch, capsys)
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr
    assert err.count("\n") == 1 and "Traceback" not in err, err
    cmd = argv[0]
    assert err.startswith(f"nearid {cmd}: error: "), err
    assert re.search(pattern, err.strip()), err
    # nothing was built: the mini world takes ~12 minutes, so its folder is the witness
    assert not (clone / "data").exists() and not (clone / "cache").exists() and not (clone / "build").exists()
    assert took < 60, took


def test_precedence_module_then_file_then_registered_then_prefix_then_hub(clone):
    # module path: found on the current folder (also for the console script, whose sys.path lacks it)
    r = resolve_encoder("enc_pkg.encoders:embed")
    assert (r.how, r.label, r.model.embed_dim) == ("module", "enc_pkg.encoders:embed", 3)
    # "enc_file:embed" is a module path (the file is importable as a module from cwd) ...
    assert resolve_encoder("enc_file:embed").how == "module"
    # ... and "enc_file.py:embed" is not (no package enc_file with a submodule py): a file path
    assert resolve_encoder("enc_file.py:embed").how == "file"
    assert resolve_encoder(str(clone / "enc_file.py") + ":embed").how == "file"
    # a file path is run once, as a module of its own (a dataclass in it works), never imported as
    # module 'enc_once' on the way (looking for a submodule 'py' of it used to run it a second time)
    (clone / "enc_once.py").write_text("import dataclasses\nwith open('runs.txt', 'a') as f:\n"
                                       "    f.write(__name__ + '\\n')\n@dataclasses.dataclass\nclass Cfg:\n"
                                       "    dim: int = 3\n" + ENC)
    r = resolve_encoder("enc_once.py:embed")
    assert (r.how, r.model.embed_dim) == ("file", 3)
    runs = (clone / "runs.txt").read_text().split()
    assert len(runs) == 1 and runs[0].startswith("_nearid_file_enc_once_"), runs
    assert "enc_once" not in sys.modules
    # a registered name (alias too) is loaded by the library, probed on two images
    r = resolve_encoder("frozen-gap", encoder_kw={"tiny": True})
    assert (r.how, r.canon) == ("registered", "efficientnet-lite0") and r.model.embed_dim > 0
    # the timm: prefix is never a module path, although a module `timm` exists
    assert resolve_encoder("timm:resnet18", encoder_kw={"pretrained": False}).how == "timm"
    # a local model folder is read as a hub model (the last resort), never as a registered name
    with pytest.raises(OSError, match=r"\[read as a local model folder\]$"):
        (clone / "emptymodel").mkdir()
        resolve_encoder("emptymodel")
    # a callable is wrapped and probed
    r = resolve_encoder(lambda ims: np.ones((len(ims), 2)), name="mine")
    assert (r.how, r.label) == ("callable", "mine")
    with pytest.raises(EncoderOutputError):
        resolve_encoder(lambda ims: np.ones((1, 2)))
    with pytest.raises(EncoderSpecError, match="got int"):
        resolve_encoder(42)


def test_score_encoder_validates_before_building_data(clone):
    from nearid_lib import score_encoder

    t0 = time.perf_counter()
    with pytest.raises(EncoderSpecError, match="unknown encoder 'no-such-encoder'"):
        score_encoder("no-such-encoder", profile="mini")
    with pytest.raises(EncoderSpecError, match="failed on the two probe images.*ZeroDivisionError"):
        score_encoder(lambda ims: 1 / 0, profile="mini")
    with pytest.raises(EncoderSpecError, match="names no callable"):
        score_encoder("enc_pkg.nothing_here:embed", profile="mini")
    assert time.perf_counter() - t0 < 60
    assert not (clone / "data").exists() and not (clone / "cache").exists()
