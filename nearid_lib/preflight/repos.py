"""The preflight's mirror check: every repository of :data:`nearid_lib.hub.PAPER_REPOS` present,
complete against its download record, a model folder holding weights; or absent for a declared reason.

Which repositories a run reads is derived, not listed: all of ``PAPER_REPOS``, less those the project
says may be absent -- a gate of :mod:`nearid_lib.gates` that names the repository (its tables are
skipped with the gate's reason), a repository the default paper profile's config names but these
settings no longer do (``eval.vlm_judge=none``: not the judge), the mask model when the release
masks every view, the generation models of FPR methods that are not generated (not in
``retrieval.generate_methods``, or your images at ``$NEARID_DOWNLOADS/fpr_generated/<method>``),
those a setting switches off (:data:`READ_WHEN`) -- and those the user accepts to be absent
(``--allow-missing``)."""
from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .. import hub
from .. import mirror as M
from ..config import PROFILES
from ..gates import GATES
from ..generate.personalize import METHODS, method_key
from ..paths import downloads_dir
from .findings import Report

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["check_repos", "config_repos", "absent_reason", "READ_WHEN"]

# Repositories (shell patterns, so a successor of the same family matches) that a run reads only
# under a setting: (is it read with ``cfg``, why not otherwise).
READ_WHEN: dict[str, tuple] = {
    "conservationxlabs/miewid*": (lambda cfg: bool(cfg.retrieval.allow_remote_code) and "miewid" in cfg.retrieval.encoders,
                                  "not read: MiewID runs remote code, opt in with retrieval.allow_remote_code=true"),
    "facebook/sam-*": (lambda cfg: cfg.idsim.source != "released",
                       "not read: PerSAM (ID-Sim Table 2c) needs ID-Sim's unpublished benchmarks, skipped in paper"),
}


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def config_repos(cfg: Profile) -> set[str]:
    """The repositories of ``PAPER_REPOS`` that the profile's config names by id."""
    known = {r for r, _, _ in hub.PAPER_REPOS}
    return {s for s in _strings(asdict(cfg)) if s in known}


def _generation_repos(cfg: Profile) -> tuple[set[str], set[str]]:
    """(repositories of the FPR methods this run generates, repositories of every method)."""
    user = downloads_dir() / "fpr_generated"
    mine = {method_key(p.name) for p in user.iterdir() if p.is_dir()} if user.is_dir() else set()
    every = {r for s in METHODS.values() for r in s.repos}
    wanted = {r for m in cfg.retrieval.generate_methods if m in METHODS and method_key(m) not in mine
              for r in METHODS[m].repos}
    return wanted, every


def absent_reason(repo: str, cfg: Profile, rep: Report) -> str | None:
    """Why ``repo`` may be absent from the mirror without a problem (None: the run needs it)."""
    if repo in rep.allow_missing:
        return "accepted absent (--allow-missing)"
    gates = [g for g in GATES.values() if repo in g.needs or repo in g.get]
    if gates:
        return "gate " + ", ".join(f"{g.key!r} skips {', '.join(g.targets[:3])}{' ...' if len(g.targets) > 3 else ''}"
                                   for g in gates)
    if repo in config_repos(PROFILES["paper"]()) - config_repos(cfg):
        return "not read with these settings (the config no longer names it)"
    for pattern, (read, why) in READ_WHEN.items():
        if fnmatch.fnmatchcase(repo, pattern) and not read(cfg):
            return why
    if repo == cfg.world.mask_model and rep.facts.get("views_without_mask") == 0:
        return "not needed: the release masks every view (CLIPSeg is never loaded)"
    wanted, every = _generation_repos(cfg)
    if repo in every and repo not in wanted:
        return "not needed: no FPR method generated here uses it (retrieval.generate_methods, your fpr_generated/)"
    return None


def _weights_problem(folder: Path) -> str | None:
    """A model folder without weights, or a diffusers component (a folder with ``config.json``) without."""
    if (folder / "model_index.json").is_file():
        empty = [d.name for d in sorted(folder.iterdir()) if d.is_dir() and (d / "config.json").is_file()
                 and not M.weight_files(d)]
        return f"diffusers component(s) without weights: {empty}" if empty else None
    return None if M.weight_files(folder) else "no weight file (*.safetensors, *.bin, *.pth)"


def check_repos(cfg: Profile, rep: Report) -> None:
    """The mirror part of the preflight (module docstring)."""
    mirror = hub.hub_dir()
    if mirror is None:
        rep.note("mirror", "NEARID_HUB_DIR is unset: every repository is read from the hub (or its cache) at run "
                           "time; nothing to check here")
        return
    if not mirror.is_dir():
        rep.problem("mirror", f"NEARID_HUB_DIR={mirror} does not exist",
                    f"python -m nearid_lib.hub download {mirror} --downloads $NEARID_DOWNLOADS, or point "
                    f"NEARID_HUB_DIR at the mirror")
        return
    n_ok, total = 0, 0
    for repo, rtype, used_for in hub.PAPER_REPOS:
        folder = mirror / repo
        dl = f"python -m nearid_lib.hub download {mirror} --only {repo}"
        gated = f"; {M.login_hint(repo)}" if repo in M.GATED else ""
        if not folder.is_dir() or not any(folder.iterdir()):
            why = absent_reason(repo, cfg, rep)
            if why:
                rep.note("mirror", f"{repo} absent ({used_for}): {why}")
            else:
                rep.problem("mirror", f"{repo} ({rtype}: {used_for}) is not in the mirror {mirror}", dl + gated)
            continue
        rec = M.read_record(mirror, repo)
        if rec is None:
            rep.problem("mirror", f"{repo}: no download record (downloaded by hand?), so its completeness is unknown",
                        f"python -m nearid_lib.hub record {mirror} {repo}"
                        + (" --repo-type dataset" if rtype == "dataset" else "") + f" (after a complete download), or {dl}")
            continue
        bad = M.check_record(folder, rec)
        if rtype == "model":
            w = _weights_problem(folder)
            bad += [w] if w else []
        if bad:
            rep.problem("mirror", f"{repo}: " + "; ".join(bad), dl + gated)
            continue
        n_ok += 1
        total += int(rec.get("bytes") or 0)
        rep.facts.setdefault("repo_bytes", {})[repo] = int(rec.get("bytes") or 0)
    rep.plan("mirror", f"{n_ok} of {len(hub.PAPER_REPOS)} repositories complete against their records, "
                       f"{total / 2**30:.2f} GiB")


def weights_bytes(folder: Path, suffix: str = ".safetensors") -> int:
    """Bytes of a model folder's ``suffix`` weight files (what a GPU must hold, at their stored dtype)."""
    return sum(p.stat().st_size for p in Path(folder).rglob(f"*{suffix}") if ".cache" not in p.parts)


def vision_geometry(folder: Path) -> tuple[int, int] | None:
    """``(patch size, width)`` of a vision backbone from its ``config.json`` (``vision_config`` when
    nested), or None."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    v = cfg.get("vision_config", cfg)
    if "patch_size" in v and "hidden_size" in v:
        return int(v["patch_size"]), int(v["hidden_size"])
    return None
