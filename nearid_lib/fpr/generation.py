"""FPR's generation step (``paper``): the personalization methods that diffusers ships
(:mod:`nearid_lib.generate.personalize`; DreamBooth fine-tuned per subject by
:mod:`nearid_lib.generate.dreambooth`) generate each subject's ten images from its reference set,
into ``data_dir(profile)/fpr_generated/<method>/<dataset>/<subject>/<i>.png``.

- **The user's folder wins**: a method with a folder ``<downloads>/fpr_generated/<method>/<dataset>/``
  (any spelling of the method's name: ``IP-Adapter``, ``ip_adapter``) is not generated for that
  dataset; :func:`nearid_lib.fpr.downloads.collect_generated` reads it instead and records the
  source of every method in the ``source`` column (notebook 11's ``11_fpr_method_sources``).
  Emu2 and OminiControl are not in diffusers: they come only from the user's folder.
- **Resumable**: images are written atomically; a subject is finished when its ``_done.json``
  (prompts, references and seeds of its images) is written, and a finished subject is never
  redone. DreamBooth's fine-tuned weights are deleted once the subject's images exist (a full
  SD3-Medium transformer per subject is 4 GB); its class images are made once per dataset.
- **Sharded**: every image has its own seed (``derive_seed("fpr_gen", method, dataset, subject, i)``)
  and its own reference draw, so the bytes do not depend on the number of processes. Under
  ``torchrun --nproc_per_node N -m nearid_lib.fpr.generation --profile paper`` each rank takes a
  contiguous block of the sorted subjects (``shard=(rank, N)`` in process).
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from PIL import Image
from tqdm.auto import tqdm

from ..config import get_profile
from ..data.fpr_layout import load_fpr_split
from ..generate import dreambooth as DB
from ..generate.items import shard_items
from ..generate.personalize import METHODS, class_word, fpr_prompts, generate_image, load_method_pipeline, method_key
from ..hub import download_command, is_available, reads
from ..io_utils import atomic_save_image, file_lock, write_json
from ..runtime.launch import end_launch, launched_state
from ..models import resolve_device
from ..paths import data_dir, downloads_dir
from ..runtime.seeding import derive_seed
from .downloads import GENERATED_DIRNAME, built_galleries

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["Subject", "GenerationRun", "generated_root", "subjects_of", "shard_subjects", "user_methods",
           "subject_dir", "is_done", "generate_fpr", "main"]

DONE = "_done.json"


@dataclass(frozen=True)
class Subject:
    """One reference identity of an FPR dataset: its references (absolute paths) and class word."""

    dataset: str
    name: str
    cls: str
    refs: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.dataset}/{self.name}"


@dataclass
class GenerationRun:
    """What :func:`generate_fpr` did: per method, subjects generated now / found finished, the
    datasets left to the user's folder, seconds and images generated."""

    root: Path
    generated: dict[str, int] = field(default_factory=dict)
    finished_before: dict[str, int] = field(default_factory=dict)
    user_folder: dict[str, list[str]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    images: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def note(self) -> str:
        """The methods not generated for want of their weights, and how to fetch them (one line each)."""
        return "; ".join(f"{METHODS[k].name} not generated: {why}" for k, why in sorted(self.skipped.items()))

    def rows(self) -> list[dict[str, Any]]:
        """One row per method (a table of notebook 11)."""
        keys = sorted(set(self.generated) | set(self.finished_before) | set(self.user_folder) | set(self.skipped))
        return [{"method": METHODS[k].name if k in METHODS else k, "generated now": self.generated.get(k, 0),
                 "finished before": self.finished_before.get(k, 0),
                 "user folder (datasets)": ", ".join(self.user_folder.get(k, [])),
                 "images": self.images.get(k, 0), "seconds": round(self.seconds.get(k, 0.0), 2),
                 "s/image": round(self.seconds[k] / self.images[k], 3) if self.images.get(k) else None,
                 "not generated because": self.skipped.get(k, "")}
                for k in keys]


def generated_root(profile: str) -> Path:
    """Where the generation step writes: ``data_dir(profile)/fpr_generated`` (a build output; the
    user's own folder stays ``<downloads>/fpr_generated``)."""
    return data_dir(profile) / GENERATED_DIRNAME


def subjects_of(folders: dict[str, Path]) -> list[Subject]:
    """Every reference identity of the FPR folders (paper key -> folder with ``train_data.csv``)."""
    out = []
    for key, folder in sorted(folders.items()):
        train = load_fpr_split(folder).train
        for name, grp in train.groupby("name", sort=True):
            out.append(Subject(key, str(name), class_word(key), tuple(sorted(map(str, grp.file_path)))))
    return out


def shard_subjects(subjects: Sequence[Subject], rank: int, world: int) -> list[Subject]:
    """Rank ``rank``'s contiguous block of the subjects sorted by ``dataset/name``, whatever order
    they came in (:func:`~nearid_lib.generate.items.shard_items`, the distractor runner's blocks)."""
    return shard_items(subjects, rank, world, key=lambda s: s.key)


def user_methods(user_root: Path | None, dataset: str) -> set[str]:
    """Method keys with a user folder for ``dataset`` (``<user_root>/<method>/<dataset>/``)."""
    if user_root is None or not Path(user_root).is_dir():
        return set()
    return {method_key(m.name) for m in Path(user_root).iterdir() if (m / dataset).is_dir()}


def subject_dir(root: Path, method: str, s: Subject) -> Path:
    """``<root>/<method>/<dataset>/<subject>``."""
    return Path(root) / method / s.dataset / s.name


def is_done(root: Path, method: str, s: Subject) -> bool:
    """Whether the subject's images are all written (its ``_done.json`` exists)."""
    return (subject_dir(root, method, s) / DONE).exists()


def _plan(method: str, s: Subject, n: int, seed: int) -> list[dict[str, Any]]:
    prompts = fpr_prompts(s.dataset, token=DB.DreamBoothConfig().token if method == "dreambooth" else None)
    out = []
    for i in range(n):
        ref = s.refs[derive_seed("fpr_ref", method, s.dataset, s.name, i, base=seed) % len(s.refs)]
        out.append({"file": f"{i}.png", "prompt": prompts[i % len(prompts)], "ref_path": ref,
                    "seed": derive_seed("fpr_gen", method, s.dataset, s.name, i, base=seed)})
    return out


def _provenance(cfg: Profile, root: Path, method: str) -> None:
    spec = METHODS[method]
    rc = cfg.retrieval
    info = {"method": spec.name, "pipeline": spec.pipeline, "repos": list(spec.repos), "guidance": spec.guidance,
            "steps": rc.generate_steps or spec.steps, "px": rc.generate_px, "negative_prompt": spec.negative,
            "adapter": list(spec.adapter) if spec.adapter else None, "adapter_scale": spec.adapter_scale,
            "prompts_per_subject": rc.prompts_per_id, "seed": cfg.seed, "hub_reads": reads()}
    if method == "dreambooth":
        info["dreambooth"] = {"mode": rc.dreambooth_mode, "steps": rc.dreambooth_steps, "px": rc.dreambooth_px,
                              "class_images": rc.dreambooth_class_images}
    write_json(info, root / method / "_provenance.json")


def _write_subject(cfg: Profile, root: Path, method: str, s: Subject, pipe, plan: list[dict]) -> int:
    rc, d = cfg.retrieval, subject_dir(root, method, s)
    made = 0
    for row in plan:
        if (d / row["file"]).exists():
            continue
        ref = Image.open(row["ref_path"]).convert("RGB") if method != "dreambooth" else None
        img = generate_image(method, pipe, row["prompt"], ref, row["seed"], cls=s.cls, px=rc.generate_px,
                             steps=rc.generate_steps)
        atomic_save_image(d / row["file"], img)
        made += 1
    write_json({"subject": s.name, "dataset": s.dataset, "method": METHODS[method].name, "images": plan}, d / DONE)
    return made


def _dreambooth_cfg(cfg: Profile, s: Subject) -> DB.DreamBoothConfig:
    """The paper's DreamBooth settings (profile sizes), seeded per subject."""
    rc = cfg.retrieval
    mp = "bf16" if cfg.generate.mixed_precision == "bf16" else "no"
    return DB.DreamBoothConfig(steps=rc.dreambooth_steps, resolution=rc.dreambooth_px, mode=rc.dreambooth_mode,
                               seed=derive_seed("dreambooth", s.dataset, s.name, base=cfg.seed) % 2**31,
                               mixed_precision=mp)


def _class_images(cfg: Profile, root: Path, pipe, s: Subject) -> list[Image.Image]:
    rc = cfg.retrieval
    folder = root / "_work" / "dreambooth" / s.dataset / "class_images"
    folder.mkdir(parents=True, exist_ok=True)
    size = {"height": rc.generate_px, "width": rc.generate_px} if rc.generate_px else {}
    with file_lock(folder / ".lock"):        # ranks sharing a dataset make its class images once
        paths = DB.generate_class_images(pipe, s.cls, rc.dreambooth_class_images,
                                         derive_seed("fpr_class", s.dataset, base=cfg.seed), folder,
                                         num_inference_steps=rc.generate_steps or 28, **size)
    return [Image.open(p).convert("RGB") for p in paths]


def _dreambooth_subject(cfg: Profile, root: Path, s: Subject, pipe, base, plan: list[dict], progress: bool) -> int:
    work = root / "_work" / "dreambooth" / s.dataset / s.name
    dbc = _dreambooth_cfg(cfg, s)
    classes = _class_images(cfg, root, pipe, s) if dbc.with_prior else None
    DB.train_dreambooth(pipe, [Image.open(r).convert("RGB") for r in s.refs], s.cls, classes, dbc, work,
                        progress=progress)
    DB.apply_dreambooth(pipe, work)
    try:
        made = _write_subject(cfg, root, "dreambooth", s, pipe, plan)
    finally:
        DB.restore_base(pipe, base)
    shutil.rmtree(work, ignore_errors=True)   # the subject's images exist: its fine-tuned weights go
    return made


def generate_fpr(cfg: Profile, folders: dict[str, Path], root: Path | None = None,
                 methods: Sequence[str] | None = None, user_root: Path | None = None,
                 pipes: dict[str, Any] | None = None, shard: tuple[int, int] | None = None,
                 progress: bool = True, device: str | None = None) -> GenerationRun:
    """Generate every method of ``methods`` (default ``cfg.retrieval.generate_methods``) for every
    subject of ``folders`` (paper key -> FPR folder) that has no user folder and is not finished.

    ``pipes``: ready pipelines by method key (the dry run's tiny ones; default: loaded from the hub
    mirror on first need, :func:`~nearid_lib.generate.personalize.load_method_pipeline`);
    ``shard``: ``(rank, world)``; ``user_root``: default ``<downloads>/fpr_generated``."""
    rc = cfg.retrieval
    root = Path(root) if root is not None else generated_root(cfg.name)
    user_root = Path(user_root) if user_root is not None else downloads_dir() / GENERATED_DIRNAME
    methods = [method_key(m) for m in (rc.generate_methods if methods is None else methods)]
    bad = [m for m in methods if m not in METHODS or METHODS[m].pipeline is None]
    if bad:
        raise ValueError(f"retrieval.generate_methods: {bad} cannot be generated here; valid: "
                         f"{[k for k, s in METHODS.items() if s.pipeline]} (Emu2 / OminiControl: user folder)")
    subs = subjects_of(folders)
    if shard is not None:
        subs = shard_subjects(subs, *shard)
    run = GenerationRun(root)
    for m in methods:
        mine = [s for s in subs if m not in user_methods(user_root, s.dataset)]
        run.user_folder[m] = sorted({s.dataset for s in subs} - {s.dataset for s in mine})
        todo = [s for s in mine if not is_done(root, m, s)]
        run.finished_before[m] = len(mine) - len(todo)
        if not todo:
            continue
        missing = [r for r in METHODS[m].repos if not is_available(r)] if m not in (pipes or {}) else []
        if missing:        # an absent download skips the method with its fetch command, never an error
            run.skipped[m] = "not in the hub mirror: " + "; ".join(f"`{download_command(r)}`" for r in missing)
            continue
        t0, made = time.perf_counter(), 0
        pipe = (pipes or {}).get(m) or load_method_pipeline(m, device or resolve_device(cfg.device),
                                                           cfg.generate.mixed_precision)
        _provenance(cfg, root, m)
        base = DB.base_state(pipe) if m == "dreambooth" else None
        for s in tqdm(todo, desc=f"generate {METHODS[m].name}", unit="subject", disable=not progress):
            plan = _plan(m, s, rc.prompts_per_id, cfg.seed)
            if m == "dreambooth":
                made += _dreambooth_subject(cfg, root, s, pipe, base, plan, progress)
            else:
                made += _write_subject(cfg, root, m, s, pipe, plan)
        run.generated[m], run.images[m], run.seconds[m] = len(todo), made, time.perf_counter() - t0
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """``[torchrun --nproc_per_node N] python -m nearid_lib.fpr.generation --profile paper [--methods ...]``:
    build the nine galleries, then generate this rank's share of every method."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--methods", nargs="*", default=None, help="method keys (default: retrieval.generate_methods)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    cfg = get_profile(args.profile, overrides=dict(kv.split("=", 1) for kv in args.set))
    state = launched_state()
    rank, world = (state.process_index, state.num_processes) if state is not None else (0, 1)
    # the galleries make fpr-galleries built: no rank waits while one builds them
    folders = built_galleries(cfg, world)
    run = generate_fpr(cfg, folders, methods=args.methods, shard=(rank, world),
                       device=str(state.device) if state is not None else None)
    print(json.dumps(run.rows(), indent=1))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
