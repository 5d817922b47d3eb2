"""The two-machine setup: ``make wheelhouse`` (scripts/wheelhouse.sh) on the machine with network,
``make install WHEELHOUSE=...`` (scripts/bootstrap.sh -> scripts/install_lock.sh) on the node without.

Offline and fast: the install runs for real, with pip ``--no-index`` from a local wheelhouse of two
small pure-python packages of the lock (their wheels rebuilt from this environment's installed files,
so nothing is downloaded), into a fresh virtual environment; the download side runs with ``pip``
replaced by a recorder (the one part that needs the network)."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import platform
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "scripts" / "requirements.lock"
PACKAGES = ("six", "annotated-doc")           # small, pure python, in the lock


def _target() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}-{sys.platform}-{platform.machine().lower()}"


def _wheel_from_installed(name: str, out: Path) -> Path:
    """A wheel of the installed distribution ``name`` rebuilt from its RECORD (a valid wheel: files,
    dist-info and a RECORD with each file's sha256)."""
    dist = metadata.distribution(name)
    base = Path(dist.locate_file(""))
    norm = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    whl = out / f"{norm}-{dist.version}-py3-none-any.whl"
    rows = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        record = None
        for f in dist.files:
            if f.name == "RECORD":
                record = f.as_posix()
                continue
            if "__pycache__" in f.parts or f.as_posix().startswith(".."):
                continue
            data = (base / f).read_bytes()
            z.writestr(f.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append([f.as_posix(), f"sha256={digest}", str(len(data))])
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows + [[record, "", ""]])
        z.writestr(record, buf.getvalue())
    return whl


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheelhouse")
    wheels = {n: _wheel_from_installed(n, d) for n in PACKAGES}
    lock = d / "tiny.lock"
    text = [f"# target: {_target()} (a test's lock)"]
    for n, w in wheels.items():
        text += [f"{n}=={metadata.version(n)} \\", f"    --hash=sha256:{_sha256(w)}"]
    lock.write_text("\n".join(text) + "\n")
    return d, lock, wheels


def _venv(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    return tmp_path / "venv" / "bin" / "python"


def _offline_env(**kw) -> dict:
    # any index pip could reach is a dead port: an install that tried the network fails loudly
    return {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1", **kw}


def test_lock_entries_of_the_tiny_lock_are_the_real_locks_versions(wheelhouse):
    _, lock, _ = wheelhouse
    for n in PACKAGES:
        assert re.search(rf"^{n}=={re.escape(metadata.version(n))} \\$", LOCK.read_text(), re.M), n


def test_install_lock_offline_from_a_local_wheelhouse(wheelhouse, tmp_path):
    d, lock, wheels = wheelhouse
    py = _venv(tmp_path)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "install_lock.sh"), str(py)], capture_output=True, text=True,
                       timeout=300, env=_offline_env(WHEELHOUSE=str(d), NEARID_LOCK_FILE=str(lock)))
    assert r.returncode == 0, r.stderr[-3000:]
    out = subprocess.run([str(py), "-c", "import six, annotated_doc, importlib.metadata as m; "
                          "print(m.version('six'), m.version('annotated-doc'))"], capture_output=True, text=True)
    assert out.stdout.split() == [metadata.version("six"), metadata.version("annotated-doc")]
    # a wheelhouse that lacks a locked package fails, offline, naming it (never a download)
    thin = tmp_path / "thin"
    thin.mkdir()
    (thin / wheels["six"].name).write_bytes(wheels["six"].read_bytes())
    py2 = _venv(tmp_path / "second")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "install_lock.sh"), str(py2)], capture_output=True, text=True,
                       timeout=300, env=_offline_env(WHEELHOUSE=str(thin), NEARID_LOCK_FILE=str(lock)))
    assert r.returncode != 0 and "annotated-doc" in r.stderr.replace("_", "-").lower()
    assert "127.0.0.1" not in r.stderr                   # pip never looked at an index
    # a wheel whose bytes differ from the lock's hash is refused
    bad = tmp_path / "bad"
    bad.mkdir()
    for w in wheels.values():
        (bad / w.name).write_bytes(w.read_bytes())
    with zipfile.ZipFile(bad / wheels["six"].name, "a") as z:
        z.writestr("extra.txt", "tampered")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "install_lock.sh"), str(py2)], capture_output=True, text=True,
                       timeout=300, env=_offline_env(WHEELHOUSE=str(bad), NEARID_LOCK_FILE=str(lock)))
    assert r.returncode != 0 and "hash" in r.stderr.lower()


def _recording_python(tmp_path: Path) -> tuple[Path, Path]:
    """A ``python`` that runs every command but ``-m pip`` for real and records pip's arguments (and
    the requirement files it is given)."""
    log = tmp_path / "pip.log"
    fake = tmp_path / "python"
    fake.write_text(f"""#!/usr/bin/env bash
if [ "$1" = -m ] && [ "$2" = pip ]; then
  echo "PIP $*" >> {log}
  prev=""
  for a in "$@"; do if [ "$prev" = -r ]; then sed 's/^/  REQ /' "$a" >> {log}; fi; prev="$a"; done
  exit 0
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    return fake, log


@pytest.mark.skipif(_target() != re.search(r"^# target: (\S+)", LOCK.read_text(), re.M)[1],
                    reason="scripts/wheelhouse.sh runs with the lock's Python only")
@pytest.mark.parametrize("torch", ["cpu", "cu128"])
def test_wheelhouse_downloads_every_locked_package_for_the_torch_build(torch, tmp_path):
    fake, log = _recording_python(tmp_path)
    out = tmp_path / "wh"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "wheelhouse.sh"), str(out)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHON": str(fake), "TORCH": torch})
    assert r.returncode == 0, r.stderr
    calls = [ln for ln in log.read_text().splitlines() if ln.startswith("PIP")]
    reqs = [ln.split()[1] for ln in log.read_text().splitlines() if ln.startswith("  REQ") and "==" in ln]
    locked = re.findall(r"^([A-Za-z0-9][^=\s]*)==", LOCK.read_text(), re.M)
    assert all(c.startswith("PIP -m pip download") and "--dest" in c for c in calls)
    if torch == "cpu":
        assert sorted(r.split("==")[0] for r in reqs) == sorted(locked)   # every entry, torch's +cpu wheel included
        assert all("--require-hashes" in c for c in calls)
        assert any("https://download.pytorch.org/whl/cpu" in c for c in calls)
    else:
        assert sorted(r.split("==")[0] for r in reqs) == sorted(set(locked) - {"torch", "torchvision"})
        assert any("torch torchvision" in c and "whl/cu128" in c and "-c" in c for c in calls)
    info = (out / "wheelhouse.txt").read_text()
    assert f"torch: {torch}" in info and f"target: {_target()}" in info


def test_bootstrap_refuses_a_wheelhouse_of_another_torch_build(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / "wheelhouse.txt").write_text("target: x\ntorch: cu128\n")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), str(tmp_path / "venv")], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "WHEELHOUSE": str(wh), "TORCH": "cpu"})
    assert r.returncode == 1 and "holds the torch build 'cu128', TORCH=cpu" in r.stderr
    assert not (tmp_path / "venv").exists()            # refused before anything was created
    r = subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), str(tmp_path / "venv")], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "WHEELHOUSE": str(tmp_path / "nope")})
    assert r.returncode == 1 and "does not exist" in r.stderr
