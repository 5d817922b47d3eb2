"""scripts/requirements.lock: the hash-checked lock of the tested environment that make install
(scripts/bootstrap.sh) installs. Offline: reads the lock, pyproject.toml, scripts/constraints.txt,
bootstrap.sh, the Makefile, environment.yml and the installed distributions' metadata."""
from __future__ import annotations

import platform
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "scripts" / "requirements.lock"
ENTRY = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
                   r"(?P<hashes>(?:\s+--hash=sha256:[0-9a-f]{64})+)")


def _norm(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> list[str]:
    """The lines pip reads: comment lines dropped, backslash continuations joined."""
    out, cur = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
        else:
            out.append((cur + line).strip())
            cur = ""
    assert not cur, "the lock ends on a continuation line"
    return out


def _entries(text: str) -> dict[str, tuple[str, list[str]]]:
    """{normalised name: (version, [sha256, ...])}; fails on any line that is not name==version
    followed by --hash=sha256 options (no markers, ranges, extras, URLs or index options)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for line in _logical_lines(text):
        m = ENTRY.fullmatch(line)
        assert m, f"not an exact == pin with --hash=sha256 lines: {line[:100]!r}"
        name = _norm(m["name"])
        assert name not in entries, f"{name} is locked twice"
        entries[name] = (m["version"], re.findall(r"sha256:([0-9a-f]{64})", m["hashes"]))
    return entries


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("paper", "dev"):
        reqs += project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "scripts" / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[_norm(name)] = version.strip()
    return pins


def _target() -> str:
    m = re.search(r"^# target: (cp3\d+-linux-x86_64)\b", LOCK.read_text(), re.M)
    assert m, "the lock has no '# target: cpXY-linux-x86_64' line (scripts/bootstrap.sh reads it)"
    return m[1]


def test_every_entry_is_an_exact_pin_with_sha256_hashes():
    entries = _entries(LOCK.read_text())
    assert len(entries) > 100, f"only {len(entries)} packages locked"
    for name, (version, hashes) in entries.items():
        Version(version)  # a valid PEP 440 version, not a range or wildcard
        assert hashes and len(set(hashes)) == len(hashes), name


def test_parser_rejects_unpinned_or_unhashed_lines():
    good = "six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via x\n"
    assert _entries(good) == {"six": ("1.17.0", ["a" * 64])}
    for bad in ("six>=1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n",
                "six==1.17.0\n",
                "six==1.* \\\n    --hash=sha256:" + "a" * 64 + "\n",
                "--extra-index-url https://example.org/simple\n"):
        with pytest.raises(AssertionError):
            _entries(good + bad)


def test_every_declared_dependency_is_locked_within_its_bounds():
    entries = _entries(LOCK.read_text())
    missing, outside = [], []
    for req in _declared():
        name = _norm(req.name)
        if name not in entries:
            missing.append(req.name)
        elif not req.specifier.contains(entries[name][0], prereleases=True):
            outside.append(f"{req} (locked {entries[name][0]})")
    assert not missing, f"declared in pyproject.toml but not in the lock: {missing} (make lock)"
    assert not outside, f"locked versions outside pyproject.toml's bounds: {outside} (make lock)"


def test_build_tools_of_the_no_build_isolation_install_are_locked():
    # bootstrap.sh installs these first, then builds sdists and nearid_lib with them
    entries = _entries(LOCK.read_text())
    assert {"pip", "setuptools", "wheel", "flit-core"} <= entries.keys()
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for req in map(Requirement, build):
        assert req.specifier.contains(entries[_norm(req.name)][0]), str(req)


def test_torch_and_torchvision_pins_equal_constraints():
    entries, pins = _entries(LOCK.read_text()), _constraints()
    assert set(pins) == {"torch", "torchvision"}
    torch = Version(entries["torch"][0])
    assert torch.public == pins["torch"] and torch.local == "cpu", \
        f"lock torch {torch} != constraints.txt torch=={pins['torch']} (+cpu build)"
    assert entries["torchvision"][0] == pins["torchvision"]


def test_lock_target_matches_environment_yml():
    target = _target()
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert target.startswith("cp" + python.split("=")[1].replace(".", "") + "-"), (target, python)


def test_bootstrap_installs_the_lock_with_require_hashes():
    scripts = ROOT / "scripts"
    text = "\n".join((scripts / f).read_text() for f in ("bootstrap.sh", "install_lock.sh", "lock_entries.sh"))
    lines = [l.strip() for l in re.sub(r"\\\n", " ", text).splitlines()]
    assert any('LOCK="${NEARID_LOCK_FILE:-$(dirname "${BASH_SOURCE[0]}")/requirements.lock}"' == l for l in lines)
    installs = [l for l in lines if l.startswith("install_r ")]
    assert len(installs) >= 3 and all("--require-hashes" in l for l in installs), installs
    assert any(l.startswith('install_r "$REST"') for l in installs) and 'REST="$LOCK"' in lines
    assert any('"$PY" -m pip install --quiet --no-compile "${@:2}" "${SRC[@]}" -r "$1"' in l for l in lines)
    # the bytecode pip no longer writes is compiled after the last install, on every core
    assert lines.index(next(l for l in lines if l.startswith('install_r "$REST"'))) < \
        lines.index(next(l for l in lines if l.startswith('"$PY" -m compileall -q -j 0 ')))
    assert any('bash "$HERE/install_lock.sh" "$PY" "$CUDA"' == l for l in lines)
    assert any("pip install" in l and "--no-deps" in l and l.endswith("-e .") for l in lines)
    makefile = (ROOT / "Makefile").read_text()
    stamp = re.search(r"^\$\(STAMP\):(.*)$", makefile, re.M)
    assert stamp and {"scripts/requirements.lock", "scripts/install_lock.sh", "scripts/lock_entries.sh"} <= \
        set(stamp[1].split())


@pytest.mark.skipif(
    f"cp{sys.version_info[0]}{sys.version_info[1]}-{sys.platform}-{platform.machine().lower()}"
    != _target(), reason="the lock's dependency closure is checked on its own target only")
def test_lock_holds_every_dependency_of_the_locked_versions():
    """Every distribution the declared dependencies pull in (their Requires-Dist, with extras and
    markers, read from this environment's installed metadata) is locked. Followed only through
    distributions installed at their locked version, so a different environment skips, not fails."""
    entries = _entries(LOCK.read_text())
    missing, seen, followed = set(), set(), 0
    todo = [(req, "pyproject.toml") for req in _declared()]
    while todo:
        req, parent = todo.pop()
        name = _norm(req.name)
        if name not in entries:
            missing.add(f"{req.name} (from {parent})")
            continue
        for extra in sorted(req.extras) or [""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue
            if Version(dist.version) != Version(entries[name][0]):
                continue
            followed += 1
            for dep in map(Requirement, dist.requires or []):
                if dep.marker is None or dep.marker.evaluate({"extra": extra}):
                    todo.append((dep, name))
    if followed < len(entries) // 2:
        pytest.skip(f"this environment holds only {followed} locked versions")
    assert not missing, f"needed but not locked: {sorted(missing)} (make lock)"
