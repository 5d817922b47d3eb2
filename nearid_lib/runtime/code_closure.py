"""Which library modules a piece of code depends on, found by following its code, not declared.

A reused result is keyed by the code that produced it (:func:`~nearid_lib.runtime.runmeta.code_fingerprint`),
so an edit of that code never serves a stale result. Keying by *all* the library, or by whole
packages, also re-keys a multi-day run's token store and trained heads when an unrelated module
(a report, a table, another paper's package) is edited. :func:`code_closure` starts from the
functions and classes that make a result and follows, transitively:

* the globals every function's code names (module-level functions, classes, constants; names
  read as attributes of a library module, ``mod.fn``), and its imports, at module level or inside
  the function (``from .x import y`` in a body is followed like a global);
* for a class: its library base classes and every method, property, static and class method;
* values held in containers (a registry ``{"name": fn}``), closures, defaults and
  ``functools.partial``;
* for an instance of a library class met on the way: its class.

The result is the set of library **modules** that hold any of the code reached, hashed whole
(:func:`closure_fingerprint`): module granularity keeps it conservative (an edit anywhere in a module
on the path re-keys), the closure keeps unrelated modules out. Code reached only through an object
passed in at run time (a ``data`` argument's class) is not seen: pass such classes as roots.
"""
from __future__ import annotations

import dis
import functools
import importlib
import importlib.util
import inspect
import types
from pathlib import Path
from typing import Any, Iterable

from .runmeta import code_fingerprint

__all__ = ["code_closure", "closure_fingerprint"]

PACKAGE = __name__.split(".")[0]      # the library (nearid_lib), whose files a closure lists
# the key machinery itself: how a key is computed, not what a result is made of
SKIP = frozenset({"runtime/code_closure.py", "runtime/runmeta.py"})


def _ours(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) else obj.__name__
    return isinstance(mod, str) and (mod == PACKAGE or mod.startswith(PACKAGE + "."))


def _code_objects(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _imports(code: types.CodeType, package: str | None) -> list[Any]:
    """Objects imported by the code's own import statements (module level or in a body)."""
    out: list[Any] = []
    ins = list(dis.get_instructions(code))
    for k, i in enumerate(ins):
        if i.opname != "IMPORT_NAME":
            continue
        level = ins[k - 2].argval if k >= 2 and ins[k - 2].opname.startswith("LOAD") else 0
        fromlist = ins[k - 1].argval if k >= 1 and ins[k - 1].opname.startswith("LOAD") else None
        name = "." * int(level or 0) + (i.argval or "")
        try:
            absname = importlib.util.resolve_name(name, package) if level else i.argval
        except (ImportError, ValueError):
            continue
        if not (absname == PACKAGE or absname.startswith(PACKAGE + ".")):
            continue
        mod = importlib.import_module(absname)
        out.append(mod)
        for attr in fromlist or ():
            if attr == "*":
                continue
            if hasattr(mod, attr):
                out.append(getattr(mod, attr))
            else:
                out.append(importlib.import_module(f"{absname}.{attr}"))
    return out


def _function_refs(fn: types.FunctionType) -> list[Any]:
    out: list[Any] = []
    g = fn.__globals__
    package = g.get("__package__") or g.get("__name__", "").rpartition(".")[0]
    for code in _code_objects(fn.__code__):
        names = set(code.co_names)
        for n in names:
            if n in g:
                v = g[n]
                out.append(v)
                if isinstance(v, types.ModuleType) and _ours(v):
                    out.extend(getattr(v, a) for a in names if hasattr(v, a))
        out.extend(_imports(code, package))
    out.extend(c.cell_contents for c in (fn.__closure__ or ()) if _cell_full(c))
    out.extend(fn.__defaults__ or ())
    out.extend((fn.__kwdefaults__ or {}).values())
    return out


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _class_refs(cls: type) -> list[Any]:
    out: list[Any] = [b for b in cls.__mro__[1:] if _ours(b)]
    for v in vars(cls).values():
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        if isinstance(v, property):
            out.extend(f for f in (v.fget, v.fset, v.fdel) if f is not None)
        elif isinstance(v, functools.cached_property):
            out.append(v.func)
        else:
            out.append(v)
    return out


def _members(mod: types.ModuleType) -> list[Any]:
    """What a module defines itself (its functions and classes, not what it imports)."""
    return [v for v in vars(mod).values()
            if (inspect.isfunction(v) or inspect.isclass(v)) and getattr(v, "__module__", None) == mod.__name__]


def code_closure(*roots: Any) -> list[str]:
    """The library modules (paths relative to the package, sorted) holding the code reachable from
    ``roots``: functions, classes, instances, and modules -- a module object or its dotted name
    (``"nearid_lib.nearid.train"``, imported when needed) as a root stands for everything it defines;
    met on the way, a module is only its own file (module docstring)."""
    pkg_dir = Path(importlib.import_module(PACKAGE).__file__).resolve().parent
    files: set[Path] = set()
    seen: set[int] = set()
    stack: list[Any] = []
    for r in roots:
        mod = importlib.import_module(r) if isinstance(r, str) else r
        if isinstance(mod, types.ModuleType):
            stack.append(mod)
            stack.extend(_members(mod))
        else:
            stack.append(r)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, complex)):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            if _ours(obj) and getattr(obj, "__file__", None):
                files.add(Path(obj.__file__).resolve())
            continue
        if isinstance(obj, (dict, types.MappingProxyType)):
            stack.extend(obj.keys())
            stack.extend(obj.values())
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
            continue
        if isinstance(obj, functools.partial):
            stack.extend([obj.func, *obj.args, *obj.keywords.values()])
            continue
        if isinstance(obj, (types.MethodType, staticmethod, classmethod)):
            stack.append(obj.__func__)
            continue
        if inspect.isclass(obj):
            if _ours(obj):
                files.add(Path(inspect.getfile(obj)).resolve())
                stack.extend(_class_refs(obj))
            continue
        if isinstance(obj, types.FunctionType):
            obj = inspect.unwrap(obj)
            if _ours(obj):
                files.add(Path(obj.__code__.co_filename).resolve())
                stack.extend(_function_refs(obj))
            continue
        if _ours(type(obj)):
            stack.append(type(obj))
    rels = (f.relative_to(pkg_dir).as_posix() for f in files if pkg_dir in f.parents)
    return sorted(r for r in rels if r not in SKIP)


@functools.lru_cache(maxsize=256)
def _closure_of(roots: tuple) -> tuple[str, ...]:
    return tuple(code_closure(*roots))


def closure_fingerprint(*roots: Any) -> str:
    """:func:`~nearid_lib.runtime.runmeta.code_fingerprint` of the modules of :func:`code_closure` (the
    module list is remembered per roots within a process; the files are hashed at every call)."""
    try:
        mods = _closure_of(tuple(roots))
    except TypeError:                    # an unhashable root
        mods = tuple(code_closure(*roots))
    return code_fingerprint(*mods)
