"""Each claim's history from git: the versions of its criterion, the commit that declared each, and
the commit of its first committed result, so "declared before its result" is computed, not asserted.

* **Versions.** Every commit that touched a declaration file (``nearid_lib/claims.py`` and
  ``nearid_lib/<package>/claims.py``) is read without importing it: the ``ClaimSpec(...)`` calls
  assigned to a module-level ``*_CLAIMS`` name are evaluated from the syntax tree
  (:class:`_Declarations`: literals, f-strings, module constants, comprehensions over literal
  tuples, one-line helper functions, the criteria and :class:`~nearid_lib.claims.criteria.Precondition`).
  Each distinct criterion-and-preconditions of a key is a version, declared at the first commit (parents
  before children) that holds it; a content that comes back (a branch merged later, a precondition
  removed again) is the version it was. An uncommitted content of the working tree is a last version
  declared ``(uncommitted)``; column ``current`` marks the version the working tree declares.
* **Results.** Every commit that touched a committed claims table (``figures/**/claims_*.csv``) is
  read; a key's first result, per profile, is the first such commit holding a row of that key with
  a verdict.
* **Before or after.** A version's criterion counts as declared at the first commit that declared
  the same criterion for the key (a precondition added or removed later does not make a new
  criterion); it was declared before its result when that commit is a proper ancestor of the first
  result's commit. A criterion declared after a result in the same profile is post hoc
  (:mod:`.exclusions`).

A fresh clone may lack the history (shallow, or no ``.git``), so the computed table is committed as
``docs/claims_history.csv`` by ``python -m nearid_lib.claims.history`` and the report reads that file.
``(uncommitted)`` in the file stands for the commit that wrote it: a test compares the file with what
this module computes, reading ``(uncommitted)`` as that commit.
"""
from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..paths import repo_root
from .criteria import AtLeast, AtMost, Greater, Precondition, RatioAtLeast, Within

__all__ = ["HISTORY_FILE", "UNCOMMITTED", "COLUMNS", "HistoryUnavailable", "declarations", "compute_history",
           "load_history", "write_history", "criterion_text", "main"]

HISTORY_FILE = Path("docs") / "claims_history.csv"
UNCOMMITTED = "(uncommitted)"
COLUMNS = ("key", "version", "criterion", "preconditions", "declared", "declared_date", "criterion_declared",
           "profile", "first_result", "first_result_date", "declared_before_result", "current")
# the declaration files, in every commit (the NearID claims lived in nearid_lib/claims.py's package first)
DECLARATION_FILE = re.compile(r"^nearid_lib/(?:[A-Za-z_]+/)?claims\.py$")
RESULT_FILE = re.compile(r"^figures/(?:.+/)?claims_[^/]*\.csv$")
_CRITERIA = {"AtLeast": AtLeast, "AtMost": AtMost, "Greater": Greater, "Within": Within,
             "RatioAtLeast": RatioAtLeast, "Precondition": Precondition}


class HistoryUnavailable(RuntimeError):
    """The repository's git history cannot be read in full (no ``.git``, a shallow clone, no git)."""


# --------------------------------------------------------------------------- declarations from source
class _Opaque:
    """A value the evaluator does not compute (a PaperRef, a call it does not know)."""


_OPAQUE = _Opaque()


@dataclass(frozen=True)
class _Declared:
    key: str
    test: Any
    preconditions: tuple


class _Declarations:
    """Evaluates just enough of a declaration module's syntax tree to find each claim's criterion."""

    def __init__(self, tree: ast.Module):
        self.env: dict[str, Any] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.found: dict[str, _Declared] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                collect = any(isinstance(t, ast.Name) and t.id.endswith("CLAIMS") for t in targets)
                value = self.eval(node.value, {}, collect) if node.value is not None else _OPAQUE
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.env[t.id] = value
                    elif isinstance(t, ast.Tuple) and isinstance(value, tuple) and len(value) == len(t.elts):
                        for name, v in zip(t.elts, value):
                            if isinstance(name, ast.Name):
                                self.env[name.id] = v

    def eval(self, node: ast.AST, local: dict, collect: bool = False) -> Any:
        ev = lambda n: self.eval(n, local, collect)                    # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return local.get(node.id, self.env.get(node.id, _OPAQUE))
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(ev(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = ev(node.operand)
            return -v if isinstance(v, (int, float)) else _OPAQUE
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = ev(node.left), ev(node.right)
            return a + b if type(a) is type(b) and isinstance(a, (tuple, str)) else _OPAQUE
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                x = ev(v.value) if isinstance(v, ast.FormattedValue) else v.value
                if isinstance(x, _Opaque):
                    return _OPAQUE
                parts.append(str(x))
            return "".join(parts)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and len(node.generators) == 1:
            gen = node.generators[0]
            seq = ev(gen.iter)
            if not isinstance(seq, tuple):
                return _OPAQUE
            out = []
            for item in seq:
                bound = self._bind(gen.target, item)
                if bound is None:
                    return _OPAQUE
                out.append(self.eval(node.elt, {**local, **bound}, collect))
            return tuple(out)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self._call(node, local, collect)
        return _OPAQUE

    @staticmethod
    def _bind(target: ast.AST, item: Any) -> dict | None:
        if isinstance(target, ast.Name):
            return {target.id: item}
        if isinstance(target, ast.Tuple) and isinstance(item, tuple) and len(item) == len(target.elts):
            out: dict = {}
            for t, v in zip(target.elts, item):
                sub = _Declarations._bind(t, v)
                if sub is None:
                    return None
                out.update(sub)
            return out
        return None

    def _call(self, node: ast.Call, local: dict, collect: bool) -> Any:
        name = node.func.id
        args = [self.eval(a, local, collect) for a in node.args]
        kwargs = {k.arg: self.eval(k.value, local, collect) for k in node.keywords if k.arg}
        if name == "tuple" and len(args) == 1 and isinstance(args[0], tuple):
            return args[0]
        if name in _CRITERIA:
            vals = [*args, *kwargs.values()]
            if any(isinstance(v, _Opaque) for v in vals):
                return _OPAQUE
            try:
                return _CRITERIA[name](*args, **kwargs)
            except TypeError:
                return _OPAQUE
        if name == "ClaimSpec":
            key = args[0] if args else kwargs.get("key", _OPAQUE)
            test = args[3] if len(args) > 3 else kwargs.get("test", _OPAQUE)
            pre = kwargs.get("preconditions", args[7] if len(args) > 7 else ())
            pre = tuple(p for p in pre if isinstance(p, Precondition)) if isinstance(pre, tuple) else ()
            if collect and isinstance(key, str) and not isinstance(test, _Opaque):
                self.found[key] = _Declared(key, test, pre)
            return _OPAQUE
        fn = self.functions.get(name)
        if fn is not None:                             # a one-line helper: return <expr>
            body = [b for b in fn.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            params = [a.arg for a in fn.args.args]
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None \
                    and len(args) <= len(params):
                bound = dict(zip(params, args))
                bound.update({k: v for k, v in kwargs.items() if k in params})
                defaults = fn.args.defaults
                for p, d in zip(params[len(params) - len(defaults):], defaults):
                    bound.setdefault(p, self.eval(d, {}, False))
                return self.eval(body[0].value, bound, collect)
        return _OPAQUE


def declarations(source: str) -> dict[str, _Declared]:
    """The claims a declaration module's ``source`` declares ({key: criterion and preconditions}),
    read from its syntax tree; {} when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return _Declarations(tree).found


def _percent(q: str) -> bool:
    return q.endswith((".ssr", ".pa"))


def criterion_text(test) -> str:
    """The criterion as a claims table prints it (percent for an SSR or PA, else 3 decimals)."""
    pct = any(_percent(q) for q in test.quantities)
    return test.criterion((lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.3f}"))


def _precondition_text(pre: Precondition) -> str:
    v = f"{100 * pre.threshold:.1f}%" if _percent(pre.q) else f"{pre.threshold:.3f}"
    return f"{pre.q} {pre.op} {v}"


# --------------------------------------------------------------------------- git
class _Git:
    def __init__(self, root: Path):
        self.root = Path(root)
        if not (self.root / ".git").exists():
            raise HistoryUnavailable(f"{self.root} has no .git")
        try:
            shallow = self.run("rev-parse", "--is-shallow-repository").strip()
        except (OSError, subprocess.CalledProcessError) as err:
            raise HistoryUnavailable(f"git cannot read {self.root}: {err}") from err
        if shallow == "true":
            raise HistoryUnavailable(f"{self.root} is a shallow clone: its history is cut")
        self._cat: subprocess.Popen | None = None

    def run(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True,
                              check=True).stdout

    def commits(self, *paths: str) -> list[tuple[str, str]]:
        """(full hash, committer date) of the commits touching ``paths``, parents before children."""
        out = self.run("log", "--reverse", "--topo-order", "--format=%H %cI", "--", *paths)
        return [tuple(line.split(" ", 1)) for line in out.splitlines() if line.strip()]   # type: ignore[misc]

    def files(self, commit: str, under: str, pattern: re.Pattern) -> list[str]:
        names = self.run("ls-tree", "-r", "--name-only", commit, "--", under).splitlines()
        return [n for n in names if pattern.match(n)]

    def show(self, commit: str, path: str) -> str:
        if self._cat is None:
            self._cat = subprocess.Popen(["git", "-C", str(self.root), "cat-file", "--batch"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._cat.stdin is not None and self._cat.stdout is not None
        self._cat.stdin.write(f"{commit}:{path}\n".encode())
        self._cat.stdin.flush()
        header = self._cat.stdout.readline().decode().split()
        if len(header) < 3 or header[1] == "missing":
            return ""
        data = self._cat.stdout.read(int(header[2]))
        self._cat.stdout.read(1)                                      # the newline after the object
        return data.decode("utf-8", errors="replace")

    def is_ancestor(self, a: str, b: str) -> bool:
        return subprocess.run(["git", "-C", str(self.root), "merge-base", "--is-ancestor", a, b],
                              capture_output=True).returncode == 0

    def close(self) -> None:
        if self._cat is not None:
            self._cat.communicate()
            self._cat = None


def _short(commit: str) -> str:
    return commit if commit == UNCOMMITTED else commit[:7]


def _declared_versions(git: _Git) -> tuple[dict[str, list[dict]], dict[str, tuple]]:
    """{key: [version dicts, each distinct content once, in order of first declaration]} over the
    declaration files' commits (parents first) and the working tree, and {key: (criterion,
    preconditions)} as the working tree declares them."""
    versions: dict[str, list[dict]] = {}

    def record(commit: str, date: str, found: dict[str, _Declared]) -> None:
        for key, d in found.items():
            sig = (d.test, d.preconditions)
            if any((v["test"], v["preconditions"]) == sig for v in versions.get(key, [])):
                continue                       # seen before (on this branch or another): not a new version
            versions.setdefault(key, []).append({"test": d.test, "preconditions": d.preconditions,
                                                 "declared": commit, "declared_date": date})

    for commit, date in git.commits("nearid_lib/claims.py", "nearid_lib/*/claims.py"):
        found: dict[str, _Declared] = {}
        for path in git.files(commit, "nearid_lib", DECLARATION_FILE):
            found.update(declarations(git.show(commit, path)))
        record(commit, date[:10], found)
    current: dict[str, _Declared] = {}
    for path in sorted(git.root.glob("nearid_lib/**/claims.py")):
        rel = path.relative_to(git.root).as_posix()
        if DECLARATION_FILE.match(rel):
            current.update(declarations(path.read_text()))
    record(UNCOMMITTED, "", current)
    now = {k: (d.test, d.preconditions) for k, d in current.items()}
    return versions, now


def _first_results(git: _Git) -> dict[tuple[str, str], tuple[str, str]]:
    """{(key, profile): (commit, date)} of the first committed claims table holding the key with a verdict."""
    first: dict[tuple[str, str], tuple[str, str]] = {}
    for commit, date in git.commits("figures"):
        for path in git.files(commit, "figures", RESULT_FILE):
            try:
                t = pd.read_csv(io.StringIO(git.show(commit, path)))
            except (pd.errors.ParserError, pd.errors.EmptyDataError):
                continue
            if "key" not in t or "verdict" not in t:
                continue
            t = t[t["key"].notna() & t["verdict"].notna()]
            prof = t["profile"].fillna("").astype(str) if "profile" in t else pd.Series("", index=t.index)
            for key, p in zip(t["key"].astype(str), prof):
                first.setdefault((key, p), (commit, date[:10]))
    return first


def compute_history(root: Path | None = None) -> pd.DataFrame:
    """The history table (:data:`COLUMNS`): one row per claim key, criterion version and profile
    with a committed result (profile "" where the key has none). Raises :class:`HistoryUnavailable`
    when the repository's history cannot be read in full."""
    git = _Git(Path(root) if root is not None else repo_root())
    try:
        versions, current = _declared_versions(git)
        results = _first_results(git)
        rows = []
        result_keys = sorted({k for k, _ in results} | set(versions))
        for key in result_keys:
            profiles = sorted(p for k, p in results if k == key) or [""]
            vs = versions.get(key) or [{"test": None, "preconditions": (), "declared": "", "declared_date": ""}]
            for i, v in enumerate(vs):
                test = v["test"]
                first_decl = next((w["declared"] for w in vs if w["test"] == test), "") if test is not None else ""
                for prof in profiles:
                    res, res_date = results.get((key, prof), ("", ""))
                    if not first_decl or not res:
                        before = ""
                    elif first_decl == UNCOMMITTED:
                        before = False
                    else:
                        before = first_decl != res and git.is_ancestor(first_decl, res)
                    rows.append({"key": key, "version": f"v{i + 1}" if test is not None else "",
                                 "criterion": criterion_text(test) if test is not None else "",
                                 "preconditions": "; ".join(_precondition_text(p) for p in v["preconditions"]),
                                 "declared": _short(v["declared"]) if v["declared"] else "",
                                 "declared_date": v["declared_date"],
                                 "criterion_declared": _short(first_decl) if first_decl else "",
                                 "profile": prof, "first_result": _short(res) if res else "",
                                 "first_result_date": res_date, "declared_before_result": before,
                                 "current": test is not None and current.get(key) == (test, v["preconditions"])})
        return pd.DataFrame(rows, columns=list(COLUMNS))
    finally:
        git.close()


def load_history(path: Path | None = None) -> pd.DataFrame:
    """The committed history table (``docs/claims_history.csv``), every cell a string; an empty
    table with :data:`COLUMNS` when the file is absent."""
    p = Path(path) if path is not None else repo_root() / HISTORY_FILE
    if not p.is_file():
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.read_csv(p, dtype=str, keep_default_na=False)


def write_history(path: Path | None = None, root: Path | None = None) -> Path:
    """Compute the history (:func:`compute_history`) and write it to ``path`` (default
    ``docs/claims_history.csv`` of the repository)."""
    root = Path(root) if root is not None else repo_root()
    out = Path(path) if path is not None else root / HISTORY_FILE
    table = compute_history(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False, lineterminator="\n")
    return out


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m nearid_lib.claims.history [PATH]``: write the claims' history from git."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        out = write_history(Path(args[0]) if args else None)
    except HistoryUnavailable as err:
        print(f"claims history: {err}; docs/claims_history.csv left as it is", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
