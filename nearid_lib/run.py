"""One setup call for every notebook, and the writers that stamp what produced an output.

::

    run = start_run(PROFILE, SEED, "04_eval_nearid_bench")   # the first code after the parameters
    cfg = run.cfg                                            # get_profile(PROFILE, seed=SEED)
    run.write_table(df, "04_table1_main")                    # figures/tables/04_table1_main.csv
    run.figure(fig, "08_fig5_kernel_pca")                    # figures/08_fig5_kernel_pca.png, returns fig

(``figures/`` is the profile's figures folder, :func:`~nearid_lib.paths.figures_dir`: mini's here,
paper's in ``figures/paper/``.)

:func:`start_run` resolves the profile with the notebook's seed, seeds python / numpy / torch
(:func:`~nearid_lib.runtime.seeding.seed_everything`), sets torch's CPU threads to the profile's
``runtime.threads`` (which ``NEARID_THREADS``, else ``OMP_NUM_THREADS`` sets when the profile is
built; unset: every core this process may use), creates the notebook's results folder and writes its ``run.json``
(:func:`~nearid_lib.runtime.runmeta.write_run_metadata`).

The notebooks after 01 open with :func:`setup_notebook` instead: ``start_run``, then the dataset
notebook 01 made (``data=False``: none, for a notebook that makes or reads its data itself) and,
when asked, the profile's frozen backbone::

    nb = setup_notebook(PROFILE, SEED, "05_loss_ablation", backbone=True)
    run, cfg, data, backbone, seeds = nb.run, nb.cfg, nb.data, nb.backbone, nb.seeds

Provenance convention: a table is written clean (only the columns its builder made) with a JSON
sidecar ``<name>.meta.json`` beside it holding ``notebook``, ``profile``, ``seed``, ``commit``,
``dirty``, ``date`` and ``numerics`` (portable or native, :mod:`nearid_lib.runtime`); the report
reads the profile from there.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import pandas as pd
import torch

from . import hub
from .config import Profile, get_profile, seeds_of
from .data import is_complete, load_profile_data, nearid_root
from .gates import closed_gates
from .io_utils import read_table_meta, skipped_path, table_meta_path, write_csv, write_json
from .models import load_backbone
from .paths import check_figures_profile, data_dir, figures_dir, results_dir
from .plots import save
from .runtime.runmeta import write_run_metadata
from .runtime import deterministic, deterministic_requested, set_torch_threads
from .runtime.seeding import seed_everything

if TYPE_CHECKING:
    from .data import NearIDData

__all__ = ["Run", "start_run", "NotebookSetup", "setup_notebook",
           "read_table_meta", "figure_caption"]


def figure_caption(fig) -> str:
    """A figure's caption from its own titles: the suptitle, else its panels' titles ("; "-joined,
    at most four), else ""."""
    sup = getattr(fig, "_suptitle", None)
    if sup is not None and sup.get_text().strip():
        return " ".join(sup.get_text().split())
    titles = [" ".join(ax.get_title().split()) for ax in fig.get_axes() if ax.get_title().strip()]
    return "; ".join(titles[:4]) + ("; ..." if len(titles) > 4 else "")


@dataclass
class Run:
    """One notebook run: its resolved profile, seed, folders and the metadata written for it."""

    cfg: Profile
    notebook: str
    seed: int
    params: dict[str, Any]
    threads: int
    results: Path
    figures: Path
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def profile(self) -> str:
        return self.cfg.name

    @property
    def tables(self) -> Path:
        return self.figures / "tables"

    def provenance(self) -> dict[str, Any]:
        """What the sidecar of every table of this run says."""
        git = self.meta.get("git", {})
        out = {"notebook": self.notebook, "profile": self.profile, "seed": self.seed,
               "commit": git.get("sha"), "dirty": git.get("dirty"),
               "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        numerics = self.meta.get("numerics")
        if numerics:    # portable or native kernel paths (run.json has the details)
            out["numerics"] = numerics["setting"] + (" (escaped: " + "; ".join(numerics["escapes"]) + ")"
                                                     if numerics.get("escapes") else "")
        read = hub.reads()
        if read:    # the hub repositories this notebook read so far, where from, at which revision
            out["hub"] = read
        loaded = hub.loads()
        if loaded:  # the models whose weights this kernel loaded (a GPU step's must be read, not loaded)
            out["loaded"] = loaded
        split = _dataset_record(self.profile, "split")
        if split:   # which train/val/test partition the dataset holds (official, or our rule)
            out["split"] = split
        masks = _dataset_record(self.profile, "masks")
        if masks:   # where the foreground masks of FG-only rows came from (the release's, or CLIPSeg)
            out["masks"] = {k: masks.get(k) for k in ("source", "rule", "layout", "model") if k in masks}
        return out

    def write_table(self, df: pd.DataFrame, name: str, **extra: Any) -> Path:
        """Write ``df`` to ``<figures>/tables/<name>.csv`` (atomically) and its provenance sidecar
        ``<name>.meta.json`` (plus ``extra``, e.g. the training ``seeds`` behind its rows); returns
        the CSV's path."""
        path = write_csv(df, self.tables / f"{name}.csv")
        write_json({"table": path.name, **self.provenance(), **extra}, table_meta_path(path))
        skipped_path(path).unlink(missing_ok=True)
        return path

    def skip_table(self, name: str, reason: str, **extra: Any) -> Path:
        """Record that this run does not produce table ``name`` and why (``tables/<name>.skipped.json``,
        with the run's provenance); the report prints the reason where the table would stand. A
        table written later by :meth:`write_table` removes the marker."""
        if not reason or not reason.strip():
            raise ValueError(f"skip_table({name!r}): a skipped table needs a stated reason")
        path = skipped_path(self.tables / f"{name}.csv")
        # the declared inputs (nearid_lib.gates) this table lacks now: the dry run accepts no other skip
        write_json({"table": f"{name}.csv", "skipped": True, "reason": reason.strip(),
                    "gates": closed_gates(name), **self.provenance(), **extra}, path)
        print(f"table {name}: skipped - {reason.strip()}")
        return path

    def write_claims(self, rows: Sequence[dict] | pd.DataFrame, name: str, **extra: Any) -> Path:
        """The notebook's claims (:func:`nearid_lib.claims.evaluate_claims` or rows of
        :func:`nearid_lib.claims.claim`) as ``tables/claims_<name>.csv``."""
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        return self.write_table(df, f"claims_{name}", **extra)

    def figure(self, fig, name: str, dpi: int = 120):
        """Save ``fig`` as ``<figures>/<name>.png`` (atomically) and return it, so that a notebook cell
        ending with this call also shows the figure inline. The PNG says where it comes from in its
        text chunks: ``Title`` (its name), ``Description`` (notebook, profile, seed), ``Source``
        (the commit, marked when the checkout had uncommitted changes) and ``Comment`` (its caption,
        :func:`figure_caption`), which the report prints under the figure."""
        git = self.meta.get("git", {})
        sha = git.get("sha") or "unknown commit"
        meta = {"Title": name, "Description": f"notebook {self.notebook}, profile {self.profile}, seed {self.seed}",
                "Source": f"nearid_lib at {sha}" + (" with uncommitted changes" if git.get("dirty") else ""),
                "Comment": figure_caption(fig)}
        return save(fig, self.figures / f"{name}.png", dpi=dpi, metadata=meta)


def _dataset_record(profile: str, key: str) -> dict | None:
    """A record of the profile's NearID dataset manifest, when the dataset exists and records one
    (the released data does): ``split`` (source, sha256, counts: :mod:`nearid_lib.data.splits`),
    ``masks`` (each view's ``mask_source`` counted, the rule: :mod:`nearid_lib.data.released_masks`)."""
    man = data_dir(profile) / "nearid" / "manifest.json"
    try:
        rec = json.loads(man.read_text()).get(key)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


ALLOW_CPU_ENV = "NEARID_ALLOW_CPU"


def require_gpu(cfg) -> None:
    """``PROFILE=paper`` is sized for GPUs: without a visible CUDA device it stops at once (rather
    than silently running ~1,000 GPU-hours on the CPU), unless ``NEARID_ALLOW_CPU=1`` says so by
    name (the dry run does). Other profiles run anywhere."""
    if cfg.name != "paper" or os.environ.get(ALLOW_CPU_ENV, "") == "1":
        return
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        raise RuntimeError(
            f"PROFILE=paper needs a CUDA GPU and none is visible (torch {torch.__version__}, {build}). "
            f"On a GPU node: `make install TORCH=cu128` installs a CUDA build of torch; check "
            f"`nvidia-smi` and CUDA_VISIBLE_DEVICES. To run on the CPU anyway: {ALLOW_CPU_ENV}=1.")


def start_run(profile: str, seed: int, notebook: str, *, overrides: Mapping[str, Any] | None = None,
              **params: Any) -> Run:
    """Set a notebook up: ``cfg = get_profile(profile, seed=seed, **overrides)``, seed everything,
    torch threads (``cfg.runtime.threads``), the results folder and its ``run.json`` (``params``: the
    notebook's other parameters, recorded there). Refuses (``FileExistsError``) when the profile's
    figures folder already holds another profile's tables
    (:func:`~nearid_lib.paths.check_figures_profile`). Returns the :class:`Run`."""
    cfg = get_profile(profile, overrides, seed=seed)
    require_gpu(cfg)
    figures = figures_dir(profile)
    # before anything is written: a run that would mix two profiles in one figures folder stops here
    check_figures_profile(figures, cfg.name)
    seed_everything(seed)
    if deterministic_requested():
        deterministic()
    threads = set_torch_threads(cfg.runtime.threads, cfg.runtime.tune_malloc)
    recorded = {"PROFILE": profile, "SEED": seed, **params}
    if overrides:
        recorded["overrides"] = dict(overrides)
    out = results_dir(profile, notebook)
    meta = json.loads(write_run_metadata(out, recorded, cfg).read_text())
    return Run(cfg=cfg, notebook=notebook, seed=int(seed), params=recorded, threads=threads, results=out,
               figures=figures, meta=meta)


@dataclass
class NotebookSetup:
    """What :func:`setup_notebook` made: the :class:`Run`, the profile's dataset (None when not
    asked for) and its frozen backbone (None when not asked for)."""

    run: Run
    data: NearIDData | None = None
    backbone: Any = None

    @property
    def cfg(self) -> Profile:
        """The run's resolved profile."""
        return self.run.cfg

    @property
    def seeds(self) -> list[int]:
        """The training seeds of the profile's tables (:func:`~nearid_lib.config.seeds_of`)."""
        return seeds_of(self.cfg)


def setup_notebook(profile: str, seed: int, notebook: str, *, data: bool | Callable[[Profile], bool] = True,
                   build_data: bool = False, backbone: bool = False, overrides: Mapping[str, Any] | None = None,
                   **params: Any) -> NotebookSetup:
    """The opening of a notebook, in one call, in this order: :func:`start_run` (``overrides``,
    ``params`` as there), the dataset notebook 01 made (:func:`~nearid_lib.data.load_profile_data`
    with ``build=build_data``: with ``build_data`` the dataset is made first where it is missing or
    unfinished, as notebook 03 does) and, with ``backbone``, the profile's frozen backbone
    (:func:`~nearid_lib.models.load_backbone`). ``data``: False loads no dataset (a notebook that
    makes or reads its data itself); a callable decides from the resolved profile (e.g. only when
    ID-Sim trains on the world). Returns a :class:`NotebookSetup` (``run``, ``cfg``, ``data``,
    ``backbone``, ``seeds``)."""
    run = start_run(profile, seed, notebook, overrides=overrides, **params)
    out = NotebookSetup(run)
    if data(run.cfg) if callable(data) else data:
        root = nearid_root(run.cfg.name)
        if not build_data and not is_complete(root) and run.cfg.world.source == "procedural":
            # a fresh clone, or the test split `nearid score` built: make the world (it resumes and
            # completes a split-selected build) instead of failing in the first cell
            print(f"the {run.cfg.name} dataset at {root} is missing or partial: building it (notebook 01's step)")
            build_data = True
        elif not build_data and not is_complete(root):
            raise FileNotFoundError(f"the {run.cfg.name} dataset is not at {root} (or unfinished): run notebook 01 "
                                    f"first: make build/{run.cfg.name}/notebooks/01_data_curation.ipynb "
                                    f"PROFILE={run.cfg.name}")
        out.data = load_profile_data(run.cfg, build=build_data)
    if backbone:
        out.backbone = load_backbone(run.cfg)[0]
    return out
