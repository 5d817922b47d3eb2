"""Every location the project reads or writes, resolved from environment variables.

| variable        | default                      | holds                                             |
|-----------------|------------------------------|---------------------------------------------------|
| NEARID_ROOT     | the repository (or cwd)      | base for the defaults below                       |
| NEARID_DATA     | $NEARID_ROOT/data            | generated worlds, released datasets (per profile) |
| NEARID_CACHE    | $NEARID_ROOT/cache           | frozen-backbone feature caches, embeddings        |
| NEARID_OUT      | $NEARID_ROOT/build           | executed notebooks, logs, CSV/JSON results, ckpts |
| NEARID_FIGURES  | $NEARID_ROOT/figures         | figures and tables; mini's (the default folder)   |
|                 | (paper: figures/paper/,      | are committed. Set, it serves every profile       |
|                 | smoke: $NEARID_OUT/smoke/figures) |                                              |
| NEARID_HUB_DIR  | unset (the hub)              | local mirror of hub repos, ``<org>/<name>`` (paper) |
| NEARID_DOWNLOADS| $NEARID_DATA/downloads       | datasets downloaded by hand (CUB, Stanford Cars,  |
|                 |                              | WildlifeReID-10k, DreamBench++, generated images) |
| HF_HOME         | huggingface default          | model weights and hub datasets (paper profile)    |

Without ``NEARID_FIGURES`` each profile has a figures folder of its own, so that no run clobbers the
committed mini results: ``mini`` writes ``figures/``, ``paper`` ``figures/paper/``, and ``smoke``
``$NEARID_OUT/smoke/figures`` (so that ``make test`` never touches ``figures/``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = [
    "repo_root", "data_dir", "cache_dir", "out_dir", "figures_dir", "results_dir",
    "checkpoint_dir", "seed_checkpoint_dir", "hf_home", "papers_dir", "downloads_dir",
    "figures_profiles", "check_figures_profile",
]


def repo_root() -> Path:
    """Root of the checkout: ``$NEARID_ROOT``, else the folder holding ``pyproject.toml`` above
    this package, else the current working directory."""
    env = os.environ.get("NEARID_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").exists():
        return here
    return Path.cwd().resolve()


def _env_dir(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


def _sub(base: Path, profile: str | None) -> Path:
    return base / profile if profile else base


def data_dir(profile: str | None = None) -> Path:
    """Datasets (generated worlds and released data) for ``profile``."""
    return _sub(_env_dir("NEARID_DATA", repo_root() / "data"), profile)


def downloads_dir() -> Path:
    """Datasets that no script can fetch from the hub (licence, other hosts), unpacked by hand in
    their publishers' layouts (docs/paper-profile.md): ``$NEARID_DOWNLOADS`` or
    ``$NEARID_DATA/downloads``."""
    return _env_dir("NEARID_DOWNLOADS", data_dir() / "downloads")


def cache_dir(profile: str | None = None) -> Path:
    """Feature caches and embedding caches for ``profile``."""
    return _sub(_env_dir("NEARID_CACHE", repo_root() / "cache"), profile)


def out_dir(profile: str | None = None) -> Path:
    """Build outputs (executed notebooks, logs, results) for ``profile``."""
    return _sub(_env_dir("NEARID_OUT", repo_root() / "build"), profile)


def results_dir(profile: str, notebook: str) -> Path:
    """Where notebook ``notebook`` (e.g. ``"04_eval_nearid_bench"``) writes its CSV/JSON results."""
    return out_dir(profile) / "results" / notebook


def checkpoint_dir(profile: str) -> Path:
    """Trained heads and adapters for ``profile``."""
    return out_dir(profile) / "checkpoints"


def figures_dir(profile: str | None = None) -> Path:
    """Figures and rendered tables of ``profile``: ``$NEARID_FIGURES`` when set (for every profile),
    else ``figures/`` for ``mini`` (and no profile), ``figures/paper/`` for ``paper`` and
    ``$NEARID_OUT/smoke/figures`` for ``smoke``."""
    if os.environ.get("NEARID_FIGURES"):
        return _env_dir("NEARID_FIGURES", repo_root() / "figures")
    if profile == "smoke":
        # the test tier's runs: never beside the committed results
        return out_dir("smoke") / "figures"
    base = repo_root() / "figures"
    # the committed mini run owns figures/ itself; any other profile gets a subfolder, so the two
    # never share a tables/ folder and mini's README never lists another profile's tables
    return base if profile in (None, "mini") else base / profile


def figures_profiles(figures: str | os.PathLike) -> dict[str, list[str]]:
    """The profiles named by the provenance sidecars in ``<figures>/tables`` (``*.meta.json`` of
    written tables, ``*.skipped.json`` of skipped ones), each with the sidecar names that say it.
    Only the folder's own ``tables/`` counts: ``figures/paper/`` inside the committed mini folder is
    another run's."""
    found: dict[str, list[str]] = {}
    tables = Path(figures) / "tables"
    for side in sorted([*tables.glob("*.meta.json"), *tables.glob("*.skipped.json")]):
        try:
            profile = json.loads(side.read_text()).get("profile")
        except (OSError, ValueError, AttributeError):
            continue    # not a sidecar this guard can read: it names no profile either
        if profile:
            found.setdefault(str(profile), []).append(side.name)
    return found


def check_figures_profile(figures: str | os.PathLike, profile: str) -> None:
    """Refuse (``FileExistsError``) to write a ``profile`` run into ``figures`` when the sidecars
    already there name another profile: one folder holds one profile's run, so a report never mixes
    tables of two profiles and a paper run never overwrites the committed mini results."""
    found = figures_profiles(figures)
    others = sorted(p for p in found if p != profile)
    if not others:
        return
    said = "; ".join(f"{p} ({len(found[p])} sidecars, e.g. tables/{found[p][0]})" for p in others)
    raise FileExistsError(
        f"the figures folder {Path(figures)} already holds tables of profile {said}, and this run is "
        f"PROFILE={profile}: a figures folder holds one profile's run. Point this run elsewhere with "
        f"NEARID_FIGURES=<folder>, or clear that folder's tables/ (and its figures) first.")


def seed_checkpoint_dir(directory: str | os.PathLike, seed: int) -> Path:
    """Where the model of training seed ``seed`` is published beside checkpoint ``directory`` when it
    is not the directory's own: ``<directory>/seeds/seed<seed>`` (NearID heads and ID-Sim models alike)."""
    return Path(directory) / "seeds" / f"seed{int(seed)}"


def hf_home() -> Path | None:
    """The Hugging Face cache (``$HF_HOME``) if set; ``None`` means the library default."""
    value = os.environ.get("HF_HOME")
    return Path(value) if value else None


def papers_dir() -> Path:
    """The paper texts (``$NEARID_PAPERS`` or ``../shared/papers`` beside the checkout)."""
    return _env_dir("NEARID_PAPERS", repo_root().parent / "shared" / "papers")
