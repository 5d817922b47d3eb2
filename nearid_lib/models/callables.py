"""Encoder arguments that name your own callable: ``"package.module:function"`` (a module path,
the current folder included, as ``python -m`` finds it) or ``"path/to/file.py:function"`` (a file
path), read in that order by :func:`import_spec`.

Nothing is imported to find out what a string is but the packages of a dotted path, so a plain
module is never run as a side effect (``file.py:fn`` does not import a module ``file``), and every
failure is one :class:`EncoderSpecError` line saying what was tried and why each reading failed.
:func:`nearid_lib.models.load_encoder` reads the other kinds (registered names, hub identifiers).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

__all__ = ["EncoderSpecError", "import_spec", "import_callable", "one_line", "HUB_PREFIXES"]


class EncoderSpecError(ValueError):
    """An encoder argument that names nothing loadable, or whose callable fails on the probe
    images; the message (one line) says what was tried."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """``err``'s message on one line (whitespace collapsed), cut at ``limit`` characters."""
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[:limit] + "..."


_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
HUB_PREFIXES = ("timm", "open_clip", "hf-hub")      # `timm:...` etc. are hub identifiers, never module paths


def _attr(spec: str, where: str, obj: Any, attr: str) -> Callable:
    for part in attr.split("."):
        if not hasattr(obj, part):
            have = sorted(k for k in getattr(obj, "__dict__", {}) if not k.startswith("_")
                          and callable(getattr(obj, k)) and not isinstance(getattr(obj, k), type(sys)))
            hint = f"; its callables: {', '.join(have[:12])}" if have else ""
            raise EncoderSpecError(f"encoder {spec!r}: {where} has no attribute {attr!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise EncoderSpecError(f"encoder {spec!r}: {attr} in {where} is not callable ({type(obj).__name__})")
    return obj


def _module_missing(spec: str, name: str) -> str | None:
    """None when ``name`` is an importable module (found as ``python -m`` finds it), else why not.

    Each parent is checked to be a package before its submodule is looked up, so no plain module
    is run to look inside it (``file.py`` is never imported as module ``file``); a parent package
    whose ``__init__`` fails is an :class:`EncoderSpecError` naming it."""
    # the current folder counts, also when the console script runs with its bin folder on sys.path
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub, parent = ".".join(parts[:i]), ".".join(parts[:i - 1])
        try:
            found = importlib.util.find_spec(sub)       # imports `parent` (a package), never `sub`
        except Exception as err:
            if not parent:                              # e.g. a __main__ without a spec
                return f"module {sub!r} not importable ({type(err).__name__})"
            raise EncoderSpecError(f"encoder {spec!r}: importing package {parent!r} failed: "
                                   f"{type(err).__name__}: {one_line(err)}") from err
        if found is None:
            return (f"package {parent!r} has no module {parts[i - 1]!r}" if parent else
                    f"no module {sub!r} on sys.path (nor in {os.getcwd()})")
        if i < len(parts) and found.submodule_search_locations is None:
            return f"{sub!r} is a module, not a package (no submodule {parts[i]!r})"
    return None


def _run_file(spec: str, path: Path) -> Any:
    """Run ``path`` as a module of its own (registered in ``sys.modules`` under a name unique to
    the file, so dataclasses and pickling find it, without shadowing an importable module)."""
    key = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    mod_name = f"_nearid_file_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{key}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(mod_name, None)
        raise EncoderSpecError(f"encoder {spec!r}: running file {str(path)!r} failed: "
                               f"{type(err).__name__}: {one_line(err)}") from err
    return module


def import_spec(spec: str) -> tuple[str, Callable] | None:
    """``"package.module:attr"`` or ``"path/to/file.py:attr"`` -> ``(how, callable)``; None when
    ``spec`` has no ``:`` (or starts with a hub prefix). Module path first, then file path."""
    left, sep, attr = spec.rpartition(":")
    if not sep or left.split(":")[0] in HUB_PREFIXES:
        return None
    if not left or not attr:
        raise EncoderSpecError(f"encoder {spec!r}: expected 'package.module:function' or 'file.py:function'")
    tried = []
    if _MODULE_RE.match(left) and left.split(".")[0] not in HUB_PREFIXES:
        why = _module_missing(spec, left)
        if why is None:
            try:
                module = importlib.import_module(left)
            except Exception as err:
                raise EncoderSpecError(f"encoder {spec!r}: importing module {left!r} failed: "
                                       f"{type(err).__name__}: {one_line(err)}") from err
            return "module", _attr(spec, f"module {left!r}", module, attr)
        tried.append(f"module path: {why}")
    else:
        tried.append(f"module path: {left!r} is not a dotted module name")
    path = Path(left).expanduser()
    if path.suffix == ".py" and path.is_file():
        return "file", _attr(spec, f"file {str(path)!r}", _run_file(spec, path), attr)
    tried.append(f"file path: no file {str(path)!r}" if path.suffix == ".py" else
                 f"file path: {left!r} does not end in .py")
    tried.append("registered name, hub id: not tried (neither contains ':')")
    raise EncoderSpecError(f"encoder {spec!r} names no callable; tried " + "; ".join(tried))


def import_callable(spec: str) -> Callable:
    """``"package.module:attr"`` or ``"path/to/file.py:attr"`` -> the callable it names (module
    path first, then file path); :class:`EncoderSpecError` says what was tried."""
    got = import_spec(spec)
    if got is None:
        raise EncoderSpecError(f"encoder {spec!r}: expected 'package.module:function' or 'file.py:function'")
    return got[1]
