"""Run metadata written beside every notebook's outputs: resolved parameters, git SHA, dirty
flag, package versions, host, profile and numerics (portable or native, the CPU, every library that
escaped the pinned code paths: :func:`nearid_lib.runtime.numerics_record`). ``write_run_metadata``
writes ``run.json`` atomically."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from ..io_utils import atomic_write_text
from ..paths import repo_root
from . import numerics_record

__all__ = ["git_state", "package_versions", "run_metadata", "write_run_metadata", "code_fingerprint"]

PACKAGES = (
    "torch", "torchvision", "numpy", "transformers", "open_clip_torch", "timm", "diffusers",
    "peft", "geomloss", "accelerate", "datasets", "scikit-learn", "scipy", "statsmodels",
    "scikit-image", "pandas", "matplotlib", "papermill", "pillow",
)


def code_fingerprint(*parts: str, package: Path | None = None) -> str:
    """A short hash of the library source that produced a result: every ``.py`` file under the
    given parts of the package (sub-packages like ``"data"`` or modules like ``"runtime/seeding.py"``;
    none = the whole package), by relative path and content.

    Reused results (a built world, feature caches, trained heads, scored runs) carry it in their
    key, so editing the code that made them never serves a stale result; git is not needed (a
    source tarball or an uncommitted edit fingerprints the same way)."""
    pkg = Path(package) if package is not None else Path(__file__).resolve().parents[1]
    files: list[Path] = []
    for part in parts or ("",):
        target = pkg / part
        if target.is_file():
            files.append(target)
        elif target.is_dir():
            files.extend(p for p in target.rglob("*.py") if "__pycache__" not in p.parts)
        else:
            raise FileNotFoundError(f"code_fingerprint: {part!r} is not a module or package of {pkg}")
    h = hashlib.sha1()
    for f in sorted(set(files)):
        h.update(f.relative_to(pkg).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def git_state(root: Path | None = None) -> dict[str, Any]:
    """``{"sha": ..., "dirty": bool}``; ``sha`` is None outside a git checkout. ``dirty`` means
    uncommitted edits to tracked files *outside* ``figures/`` (a run rewrites the committed
    figures and tables itself, which says nothing about the code that produced them)."""
    root = Path(root or repo_root())
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)figures"], cwd=root,
                                capture_output=True, text=True, check=True, timeout=10).stdout
        return {"sha": sha, "dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def run_metadata(params: Mapping[str, Any], profile: Any = None) -> dict[str, Any]:
    """Everything needed to say what produced an output."""
    try:
        import torch

        devices = ["cpu"] + [f"cuda:{i} {torch.cuda.get_device_name(i)}"
                             for i in range(torch.cuda.device_count())]
    except Exception:  # pragma: no cover
        devices = ["cpu"]
    prof = profile.to_dict() if hasattr(profile, "to_dict") else profile
    return {
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "params": dict(params),
        "profile": prof,
        "git": git_state(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "devices": devices,
        "packages": package_versions(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("NEARID_", "HF_"))},
        "numerics": numerics_record(),
    }


def write_run_metadata(out: str | os.PathLike, params: Mapping[str, Any], profile: Any = None) -> Path:
    """Write ``run.json`` into folder ``out`` (created) and return its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "run.json"
    atomic_write_text(path, json.dumps(run_metadata(params, profile), indent=2, default=str))
    return path
