"""Every location the project reads or writes, resolved from environment variables.

| variable        | default                      | holds                                             |
|-----------------|------------------------------|---------------------------------------------------|
| NEARID_ROOT     | the repository (or cwd)      | base for the defaults below                       |
| NEARID_DATA     | $NEARID_ROOT/data            | generated worlds, released datasets (per profile) |
| NEARID_CACHE    | $NEARID_ROOT/cache           | frozen-backbone feature caches, embeddings        |
| NEARID_OUT      | $NEARID_ROOT/build           | executed notebooks, logs, CSV/JSON results, ckpts |
| NEARID_FIGURES  | $NEARID_ROOT/figures         | committed figures and tables (mini/paper)         |
| NEARID_HUB_DIR  | unset (the hub)              | local mirror of hub repos, ``<org>/<name>`` (paper) |
| NEARID_DOWNLOADS| $NEARID_DATA/downloads       | datasets downloaded by hand (CUB, Stanford Cars,  |
|                 |                              | WildlifeReID-10k, DreamBench++, generated images) |
| HF_HOME         | huggingface default          | model weights and hub datasets (paper profile)    |

`smoke` runs never write into the committed ``figures/`` folder: their figures go to
``$NEARID_OUT/smoke/figures`` so that ``make test`` cannot clobber the reproduced results.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "repo_root", "data_dir", "cache_dir", "out_dir", "figures_dir", "results_dir",
    "checkpoint_dir", "seed_checkpoint_dir", "hf_home", "papers_dir", "downloads_dir",
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
    """Figures and rendered tables. ``smoke`` goes to the build folder, never to ``figures/``."""
    if profile == "smoke" and "NEARID_FIGURES" not in os.environ:
        return out_dir("smoke") / "figures"
    return _env_dir("NEARID_FIGURES", repo_root() / "figures")


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
