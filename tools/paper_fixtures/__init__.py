"""The paper profile's dry run: a fixture mirror of everything ``PROFILE=paper`` reads, in the
published layouts exactly, with tiny images and tiny random-init models of the paper's classes.

``python -m tools.paper_fixtures HUB_DIR DOWNLOADS_DIR`` writes

- ``HUB_DIR/<org>/<name>``: every hub repository of the paper profile as ``hf download
  --local-dir`` leaves it (datasets in their publishers' layouts: parquet shards + ``README.md``
  card, or ``save_to_disk`` folders for the NearID distractors; models: ``save_pretrained`` folders
  under the paper's model ids), see :mod:`.nearid`;
- ``DOWNLOADS_DIR``: the hand downloads in their publishers' layouts (FPR galleries and generated
  images, :mod:`.fpr`; DreamBench++ and ID-Sim benchmarks, :mod:`.idsim`) and the NearID authors'
  GitHub release (``NearID/``: official splits, per-image DreamBench++ scores, judge template).

``make dryrun-paper`` then runs every notebook with ``PROFILE=paper``, ``NEARID_HUB_DIR=HUB_DIR``,
``NEARID_DOWNLOADS=DOWNLOADS_DIR`` and the size-only overrides of :data:`SIZE_OVERRIDES` (sizes and
steps, never a code path).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from nearid_lib import hub
from nearid_lib import mirror as M
from nearid_lib.gates import closed_gates, gates_for
from nearid_lib.io_utils import read_table_meta, skip_reason
from nearid_lib.paper_specs import load_specs
from .fpr import write_fpr_downloads, write_fpr_models
from .personalize import write_personalize_models
from .idsim import write_idsim_downloads, write_idsim_models
from .nearid import write_authors_release, write_nearid_datasets, write_nearid_models

__all__ = ["SIZE_OVERRIDES", "write_mirror", "overrides_text", "check_tables", "check_step_records", "check_kernel_loads", "record_mirror"]

# Sizes and steps only: the same code paths as a GPU run of the paper profile, on tiny data and
# tiny models (their native 32 px input, 2 val / 4 test identities, a few training steps).
SIZE_OVERRIDES: dict[str, str] = {
    "world.n_val_ids": "2",
    "world.n_test_ids": "4",
    "backbone.image_size": "32",
    "backbone.batch_size": "8",
    "head.num_heads": "4",
    "head.out_dim": "32",
    "train.batch_size": "4",
    "train.epochs": "1",
    "train.max_steps": "4",
    "train.warmup_steps": "1",
    "train.checkpoint_every": "2",
    "eval.n_seeds": "1",
    "eval.alphas": "0.0,1.0",
    "eval.betas": "0.0,0.1",
    "eval.vlm_max_ids": "2",
    "eval.vlm_max_new_tokens": "16",
    "eval.kpca_ids": "4",
    "eval.qualitative_rows": "2",
    # ID-Sim on the public benchmarks: the tiny DINO rows at their native 32 px, a few judged pairs
    "idsim.image_size": "32",
    "idsim.eval_batch_size": "8",
    "idsim.mllm_max_pairs": "2",
    "idsim.mllm_max_new_tokens": "16",
    "retrieval.gallery_per_id": "3",
    "retrieval.refs_per_id": "[1,2]",
    "retrieval.ids_per_species": "2",
    "retrieval.gallery_sizes": "[1,2,3]",
    "retrieval.subject_counts": "[2,3]",
    "retrieval.n_qualitative": "2",
    # FPR generation with the tiny pipelines: 2 prompts per subject, 32 px, 2 denoising steps,
    # DreamBooth 2 steps at 32 px with 2 class images
    "retrieval.prompts_per_id": "2",
    "retrieval.generate_px": "32",
    "retrieval.generate_steps": "2",
    "retrieval.dreambooth_steps": "2",
    "retrieval.dreambooth_px": "32",
    "retrieval.dreambooth_class_images": "2",
    # the FPR authors' Re-ID rule at the fixture's 5-6 images per identity; carvekit's inputs at 64 px
    "retrieval.reid_refs": "[1,2]",
    "retrieval.reid_gallery": "[2,3]",
    "retrieval.bg_sizes": "[64,64]",
}


def overrides_text(extra: dict[str, str] | None = None) -> str:
    """:data:`SIZE_OVERRIDES` (plus ``extra``) as a ``NEARID_SET`` value."""
    return "; ".join(f"{k}={v}" for k, v in {**SIZE_OVERRIDES, **(extra or {})}.items())


def record_mirror(hub_dir: str | Path, downloads_dir: str | Path | None = None) -> list[str]:
    """Write the download record of every repository of ``hub.PAPER_REPOS`` in the fixture mirror
    (and of the authors' release in ``downloads_dir``), as ``python -m nearid_lib.hub download``
    leaves them: what the preflight checks the folders against. Returns the repositories recorded."""
    hub_dir = Path(hub_dir)
    done = []
    for repo, rtype, _ in hub.PAPER_REPOS:
        folder = hub_dir / repo
        if folder.is_dir():
            M.write_record(hub_dir, repo, rtype, hub.mirror_revision(folder) or "dryrun-fixture",
                           M.scan_files(folder), M.fetch_policy(repo, rtype), recorded_by="paper_fixtures")
            done.append(repo)
    for repo, folder, _ in hub.GIT_REPOS:
        where = Path(downloads_dir) / folder if downloads_dir is not None else None
        if where is not None and where.is_dir():
            M.write_record(downloads_dir, repo, "git", "dryrun-fixture", M.scan_files(where), None,
                           recorded_by="paper_fixtures")
            done.append(repo)
    return done


def write_mirror(hub_dir: str | Path, downloads_dir: str | Path, seed: int = 0) -> dict[str, list[str]]:
    """Write the whole fixture mirror (hub repos and hand downloads); returns what was written."""
    hub_dir, downloads_dir = Path(hub_dir), Path(downloads_dir)
    written = {"datasets": write_nearid_datasets(hub_dir, seed=seed), "models": write_nearid_models(hub_dir),
               "authors_release": [str(write_authors_release(downloads_dir, seed=seed))]}
    write_fpr_downloads(downloads_dir, seed=seed)
    write_fpr_models(hub_dir)
    written["fpr"] = ["downloads", "models", *write_personalize_models(hub_dir, seed=seed)]
    write_idsim_downloads(downloads_dir, seed=seed)
    write_idsim_models(hub_dir)
    written["idsim"] = ["downloads"]
    written["records"] = record_mirror(hub_dir, downloads_dir)
    return written


def _numeric(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(dtype=float)


def check_step_records(profile: str = "paper",
                       required: tuple[str, ...] = ("train", "sweep", "judge-nearid", "judge-mtg", "judge-dbpp",
                                                    "idsim-mllm")) -> list[str]:
    """Problems where a step of the dry run processed another number of items than the resource
    ledger counts at the fixture's size (the sizes read from the fixture mirror by the preflight's
    data check, with the dry run's size overrides), and ``required`` steps that recorded nothing."""
    from nearid_lib.config import get_profile
    from nearid_lib.preflight.datasets import check_datasets
    from nearid_lib.preflight.findings import Report
    from nearid_lib.steps.ledger import Sizes, check_records, recorded_items

    cfg = get_profile(profile, overrides=SIZE_OVERRIDES)
    rep = Report(profile)
    check_datasets(cfg, rep)
    sizes = Sizes.from_facts(rep.facts, cfg)
    done = recorded_items(profile)
    return check_records(profile, sizes, cfg) + [f"step {s}: no record of its items (did it run?)"
                                                  for s in required if s not in done]


def check_kernel_loads(figures: str | Path) -> list[str]:
    """Problems where a notebook's kernel loaded the weights of a model that a GPU step of the runner
    declares (its tables' sidecars, ``loaded``): in the paper profile a notebook reads the step's
    outputs (answers, images, stores) and never loads a judge, a generator or a step's model itself.
    A model the notebooks load themselves too (the frozen backbone they score heads with), or that a
    step still run inside a notebook uses, is allowed."""
    from nearid_lib.steps.ledger import all_steps

    steps = all_steps()
    in_notebooks = {r for s in steps for m in s.models if not s.target or m.in_kernels for r in (m.repo, *m.companions)}
    declared = {r: s.name for s in steps if s.target for m in s.models for r in (m.repo, *m.companions)
                if r not in in_notebooks}
    problems = []
    for side in sorted((Path(figures) / "tables").glob("*.meta.json")):
        meta = json.loads(side.read_text())
        for repo in meta.get("loaded") or []:
            if repo in declared:
                problems.append(f"{side.name}: notebook {meta.get('notebook')} loaded {repo}, a model of step "
                                f"{declared[repo]} (python -m nearid_lib.steps run ...): it must read that step's outputs")
    return sorted(set(problems))


def check_tables(figures: str | Path, profile: str = "paper") -> list[str]:
    """Problems with a run's tables: every ``paper_values`` spec produced in ``profile`` must have
    its CSV, with at least one finite value in each metric column where the paper has a number, or
    a skip marker. A skip, or a metric column with no value, is accepted only for a declared gate
    (:mod:`nearid_lib.gates`) that names the table (or ``table:column``) and whose input is absent
    now; any other skip or empty column is a problem (a table skipped for a bug fails the dry run).
    Returns the problems (empty: the run is complete)."""
    figures = Path(figures)
    problems = []
    for s in load_specs():
        meta = json.loads(Path(s.paper_csv).with_name(f"{s.key}.meta.json").read_text()) if s.paper_csv else {}
        if not s.ours or profile not in (meta.get("produced_in") or []):
            continue
        for path, _ in s.also:         # further tables of ours: written, or skipped for a closed gate
            extra, name = figures / path, Path(path).stem
            if not extra.exists() and not (skip_reason(extra) and closed_gates(name)):
                problems.append(f"{s.key}: {path} neither written nor skipped for a closed gate "
                                f"({skip_reason(extra) or 'no skip marker'})")
        ours = figures / s.ours
        table = Path(s.ours).stem
        if not ours.exists():
            why = skip_reason(ours)
            if not why:
                problems.append(f"{s.key}: {s.ours} neither written nor skipped with a reason")
            elif not closed_gates(table):
                declared = [g.key for g in gates_for(table)]
                problems.append(f"{s.key}: {s.ours} skipped without a closed gate (declared gates "
                                f"{declared or 'none'} all have their input): {why}")
            continue
        side = read_table_meta(ours) or {}
        if side.get("profile") not in (None, profile):
            problems.append(f"{s.key}: {s.ours} was written by profile {side.get('profile')!r}, not {profile!r}")
        df = pd.read_csv(ours)
        paper = pd.read_csv(s.paper_csv) if s.paper_csv and Path(s.paper_csv).exists() else pd.DataFrame()
        for m in s.metrics:
            if m in paper and _numeric(paper, m).notna().any() and m in df:
                v = _numeric(df, m)
                if not v.map(lambda x: isinstance(x, float) and math.isfinite(x)).any() \
                        and not closed_gates(table, m):
                    problems.append(f"{s.key}: column {m!r} of {s.ours} has no finite value and no closed gate "
                                    f"declares it (nearid_lib.gates)")
    return problems
