"""One resolver for everything the ``paper`` path fetches from the Hugging Face hub.

Compute nodes of most clusters have no internet. A user downloads each repository once into a
local mirror, in the hub's own repository layout, with the client the lock installs (``hf``;
``huggingface-hub`` 1.x/2.x no longer ships ``huggingface-cli``)::

    python -m nearid_lib.hub download $MIRROR          # every repo of PAPER_REPOS, resumable
    hf download Aleksandar/NearID --repo-type dataset --local-dir $MIRROR/Aleksandar/NearID   # or one at a time

and sets ``NEARID_HUB_DIR=$MIRROR``. The authors' GitHub release (official splits, per-image
DreamBench++ ratings, the judge's prompt: :data:`GIT_REPOS`) goes to ``$NEARID_DOWNLOADS/NearID``. Then every dataset and model load of the library reads
``$MIRROR/<org>/<name>`` (parquet shards + dataset card for datasets, ``save_pretrained`` folders for
models) and never the network; a repository missing from the mirror is an error that prints the
command that fetches it. Without ``NEARID_HUB_DIR`` the repo id goes to the hub (or its cache) at the
pinned revision of :data:`REVISIONS` where one is known.

Every resolution is recorded (:func:`reads`): the table sidecars of a run name each repository read,
where from, and its revision (a mirror made by ``hf download --local-dir`` keeps the commit it
downloaded in ``.cache/huggingface/download/*.metadata``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["HUB_DIR_ENV", "REVISIONS", "PAPER_REPOS", "HubError", "Resolved", "hub_dir", "resolve",
           "model_source", "is_available", "load_hub_dataset", "reads", "clear_reads",
           "download_command", "mirror_revision", "parquet_splits", "GIT_REPOS", "git_command",
           "download_commands", "download_all", "DownloadError", "arrow_splits"]

HUB_DIR_ENV = "NEARID_HUB_DIR"

# Revisions pinned where the project knows one (repo id -> commit). None of the released repos
# publishes a tagged revision and none could be read from here (no hub access): the revision that
# was actually read is recorded per table instead (``reads()``).
REVISIONS: dict[str, str] = {}

# (repo id, repo type, what it is used for). The README's download list is this table.
PAPER_REPOS: tuple[tuple[str, str, str], ...] = (
    ("Aleksandar/NearID", "dataset", "NearID positives (all NearID tables)"),
    *((f"Aleksandar/NearID-{s}", "dataset", f"NearID distractors, source {s} (Tables 1, 5, 7)")
      for s in ("Flux", "Flux_1024", "FluxC", "FluxC_1024", "PowerPaint", "Qwen", "Qwen_1328", "SDXL",
                "SDXL_1024")),
    ("abdo-eldesokey/mtg-dataset", "dataset", "MTG part edits (M-O, MTG SSR/PA)"),
    ("google/siglip2-so400m-patch14-384", "model", "frozen backbone of NearID"),
    ("Aleksandar/nearid-siglip2", "model", "released NearID weights (a row of Tables 1, 5, 7)"),
    ("openai/clip-vit-large-patch14", "model", "CLIP baseline rows"),
    ("openai/clip-vit-base-patch32", "model", "FPR general encoder"),
    ("facebook/dinov2-large", "model", "DINOv2 baseline rows, ID-Sim backbone row"),
    ("facebook/dinov2-base", "model", "FPR general encoder"),
    ("CIDAS/clipseg-rd64-refined", "model", "object masks of the released NearID views (not released)"),
    ("Qwen/Qwen3-VL-30B-A3B-Instruct", "model", "VLM judge rows (NearID Table 1, ID-Sim Table 2a)"),
    ("facebook/sam-vit-huge", "model", "PerSAM (ID-Sim Table 2c; the table is skipped in paper, see README)"),
    ("chaenayo/Subjects2k", "dataset", "ID-Sim Subjects2k (Fig. 25, Tables 2a/2b)"),
    ("chaenayo/id-sim_dinov3_vitl16_cls_patch", "model", "released ID-Sim: LoRA + heads over the DINOv3 below "
     "(Fig. 25, Tables 2a/2b rows)"),
    ("facebook/dinov3-vitl16-pretrain-lvd1689m", "model", "frozen DINOv3 row of the ID-Sim tables (gated: accept the licence)"),
    # the authors' three other released backbones (rows of their own; LoRA + two heads each, sizes unknown)
    ("chaenayo/id-sim_dinov3_vitb16_cls_patch", "model", "released ID-Sim over DINOv3 ViT-B/16 (an extra row)"),
    ("facebook/dinov3-vitb16-pretrain-lvd1689m", "model", "its DINOv3 ViT-B/16 base (gated: accept the licence)"),
    ("chaenayo/id-sim_dinov2_vitl14_cls_patch", "model", "released ID-Sim over DINOv2 ViT-L/14 (facebook/dinov2-large)"),
    ("chaenayo/id-sim_dinov2_vitb14_cls_patch", "model", "released ID-Sim over DINOv2 ViT-B/14 (facebook/dinov2-base)"),
    ("Donghyun99/Stanford-Cars", "dataset", "FPR Stanford Cars gallery (FPR Table 13), the hub copy the authors use"),
    ("imageomics/bioclip-2", "model", "FPR specialised encoder for CUB (FPR Tables 10-12)"),
    ("conservationxlabs/miewid-msv2", "model", "FPR MiewID as the authors run it, the paper's row (remote code: opt "
     "in, README; model.safetensors 206 MB)"),
    ("conservationxlabs/miewid-msv3", "model", "FPR MiewID msv3, an extra row beside msv2 (remote code: opt in)"),
    # FPR Table 14's background removal (carvekit 4.1.2's HiInterface networks; their files, not carvekit's downloader)
    ("Carve/tracer_b7", "model", "FPR background removal: TRACER-B7 tracer_b7.pth, 267 MB (carvekit pins commit "
     "d8a8fd9e; main also holds a 267 MB fine-tuned variant the authors did not use)"),
    ("Carve/fba", "model", "FPR background removal: FBA matting fba_matting.pth, 139 MB (carvekit pins a5d3457d)"),
    # FPR's generation step (nearid_lib.generate.personalize.METHODS; FLUX.1 and SD3 are gated: accept
    # the licences first); a method with a user folder under $NEARID_DOWNLOADS/fpr_generated needs none
    ("stabilityai/stable-diffusion-3-medium-diffusers", "model", "FPR DreamBooth (fine-tuned per subject)"),
    ("stabilityai/stable-diffusion-xl-base-1.0", "model", "FPR IP-Adapter and IP-Adapter-Plus base"),
    ("h94/IP-Adapter", "model", "FPR IP-Adapter ViT-G / IP-Adapter-Plus ViT-H weights and image encoders"),
    ("black-forest-labs/FLUX.1-Kontext-dev", "model", "FPR FLUX.1 Kontext"),
    ("black-forest-labs/FLUX.1-Fill-dev", "model", "FPR Diptych Prompting (over FLUX.1 Fill)"),
)
# Only when regenerating distractor sources (opt-in, notebook 02): nearid_lib.generate.specs.DEFAULT_HUB_IDS.

# (GitHub repo, folder under $NEARID_DOWNLOADS, what it is used for): the authors' code releases
# whose files the paper path reads (never their code).
GIT_REPOS: tuple[tuple[str, str, str], ...] = (
    ("Gorluxor/NearID", "NearID", "official splits (splits/*.json), per-image DreamBench++ scores "
     "(dreambench_plus/ratings), the judge's prompt (evaluation/vl_template_v2.txt)"),
)


class HubError(OSError):
    """A repository the run needs is neither in the mirror nor reachable; the message says how to get it."""


@dataclass(frozen=True)
class Resolved:
    """Where one repository is read from: ``source`` is a local folder (mirror) or the repo id (hub)."""

    repo_id: str
    repo_type: str
    source: str
    local: bool
    revision: str | None

    @property
    def path(self) -> Path | None:
        return Path(self.source) if self.local else None


_READS: dict[str, dict[str, Any]] = {}


def hub_dir() -> Path | None:
    """The local mirror (``$NEARID_HUB_DIR``), or None when loads go to the hub."""
    v = os.environ.get(HUB_DIR_ENV, "").strip()
    return Path(v).expanduser().resolve() if v else None


def download_command(repo_id: str, repo_type: str = "model", mirror: str | os.PathLike | None = None) -> str:
    """The shell command that puts ``repo_id`` into the mirror's layout (``hf download``, the
    client of the locked ``huggingface-hub``)."""
    where = f"{mirror or '$' + HUB_DIR_ENV}/{repo_id}"
    kind = " --repo-type dataset" if repo_type == "dataset" else ""
    rev = f" --revision {REVISIONS[repo_id]}" if repo_id in REVISIONS else ""
    return f"hf download {repo_id}{kind}{rev} --local-dir {where}"


def git_command(repo: str, folder: str, downloads: str | os.PathLike | None = None) -> str:
    """The shell command that puts the GitHub repository ``repo`` at ``$NEARID_DOWNLOADS/<folder>``
    (a shallow clone; kept as it is when the folder is already a clone)."""
    where = f"{downloads or '$NEARID_DOWNLOADS'}/{folder}"
    return f"[ -d {where}/.git ] || git clone --depth 1 https://github.com/{repo} {where}"


def download_commands(mirror: str | os.PathLike | None = None,
                      downloads: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """``[(what it is for, shell command)]``: every repository of :data:`PAPER_REPOS` into the
    mirror, then every :data:`GIT_REPOS` clone into the downloads folder."""
    out = [(used_for, download_command(rid, rtype, mirror)) for rid, rtype, used_for in PAPER_REPOS]
    out += [(used_for, git_command(repo, folder, downloads)) for repo, folder, used_for in GIT_REPOS]
    return out


class DownloadError(RuntimeError):
    """A download of :func:`download_all` failed; the message names the repository."""


def _folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and ".cache" not in f.relative_to(path).parts)


def download_all(mirror: str | os.PathLike, downloads: str | os.PathLike | None = None,
                 repos: Sequence[str] | None = None, log: Callable[[str], None] = print,
                 fetch: Callable[..., Any] | None = None, clone: Callable[[str, Path], None] | None = None) -> list[dict]:
    """Download every repository of :data:`PAPER_REPOS` (or only ``repos``) into ``mirror`` with
    ``huggingface_hub.snapshot_download(local_dir=...)`` (resumable: files already there are kept),
    and clone :data:`GIT_REPOS` into ``downloads`` when given. One line per repository with its
    size and the commit read; the first failure raises :class:`DownloadError` naming the repository
    (what was downloaded before it stays). ``fetch`` / ``clone`` replace the network calls (tests)."""

    if fetch is None:
        from huggingface_hub import snapshot_download as fetch
    if clone is None:
        def clone(url: str, where: Path) -> None:
            subprocess.run(["git", "clone", "--depth", "1", url, str(where)], check=True)
    mirror = Path(mirror).expanduser()
    want = set(repos) if repos else None
    known = {r for r, _, _ in PAPER_REPOS} | {r for r, _, _ in GIT_REPOS}
    if want and want - known:
        raise DownloadError(f"unknown repositories {sorted(want - known)}; known: {sorted(known)}")
    done = []
    for repo_id, repo_type, _ in PAPER_REPOS:
        if want is not None and repo_id not in want:
            continue
        where = mirror / repo_id
        try:
            fetch(repo_id=repo_id, repo_type=repo_type, local_dir=str(where), revision=REVISIONS.get(repo_id))
        except Exception as err:                       # noqa: BLE001 - the message names the repo
            raise DownloadError(f"{repo_type} {repo_id} -> {where}: download failed: {type(err).__name__}: {err}") from err
        rec = {"repo": repo_id, "type": repo_type, "path": str(where), "bytes": _folder_size(where),
               "revision": mirror_revision(where)}
        log(f"{repo_id:<48} {rec['bytes'] / 2**30:8.2f} GiB  commit {rec['revision'] or '?'}  -> {where}")
        done.append(rec)
    if downloads is not None:
        for repo, folder, _ in GIT_REPOS:
            if want is not None and repo not in want:
                continue
            where = Path(downloads).expanduser() / folder
            if not (where / ".git").is_dir():
                try:
                    clone(f"https://github.com/{repo}", where)
                except Exception as err:               # noqa: BLE001
                    raise DownloadError(f"git {repo} -> {where}: clone failed: {err}") from err
            rev = _git_head(where)
            rec = {"repo": repo, "type": "git", "path": str(where), "bytes": _folder_size(where), "revision": rev}
            log(f"{repo:<48} {rec['bytes'] / 2**30:8.2f} GiB  commit {rev or '?'}  -> {where}")
            done.append(rec)
    return done


def _git_head(where: Path) -> str | None:

    try:
        return subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def mirror_revision(path: str | os.PathLike) -> str | None:
    """The commit a ``hf download --local-dir`` folder was downloaded at (first line of
    its ``.cache/huggingface/download/*.metadata`` files), or None when the folder does not say."""
    meta = Path(path) / ".cache" / "huggingface" / "download"
    if not meta.is_dir():
        return None
    for f in sorted(meta.rglob("*.metadata")):
        try:
            line = f.read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            continue
        if line:
            return line
    return None


def _record(r: Resolved) -> Resolved:
    _READS[r.repo_id] = {"repo_type": r.repo_type, "source": "mirror" if r.local else "hub",
                         "path": r.source if r.local else None, "revision": r.revision}
    return r


def resolve(repo_id: str, repo_type: str = "model", revision: str | None = None) -> Resolved:
    """Where to read ``repo_id`` from (see the module docstring); records the read.

    A path that exists is taken as it is (a user's own folder). With ``NEARID_HUB_DIR`` set, a
    repository missing from the mirror raises :class:`HubError` with its download command."""
    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type must be 'model' or 'dataset', got {repo_type!r}")
    p = Path(repo_id).expanduser()
    if p.exists():
        return _record(Resolved(str(repo_id), repo_type, str(p.resolve()), True, mirror_revision(p)))
    mirror = hub_dir()
    if mirror is not None:
        local = mirror / repo_id
        if not local.is_dir() or not any(local.iterdir()):
            raise HubError(f"{repo_type} {repo_id!r} is not in the local hub mirror {HUB_DIR_ENV}={mirror} "
                           f"(looked for {local}). Fetch it on a machine with internet:\n  "
                           + download_command(repo_id, repo_type, mirror))
        return _record(Resolved(repo_id, repo_type, str(local), True,
                                mirror_revision(local) or revision or REVISIONS.get(repo_id)))
    return _record(Resolved(repo_id, repo_type, repo_id, False, revision or REVISIONS.get(repo_id)))


def model_source(repo_id: str, revision: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(name_or_path, from_pretrained_kwargs)`` for a model repo: the mirror folder, or the repo id
    with its pinned ``revision``."""
    r = resolve(repo_id, "model", revision)
    return r.source, ({} if r.local or not r.revision else {"revision": r.revision})


def is_available(repo_id: str, repo_type: str = "model") -> bool:
    """Whether ``repo_id`` can be read: in the mirror when one is set, else assumed reachable (hub)."""
    mirror = hub_dir()
    if Path(repo_id).expanduser().exists() or mirror is None:
        return True
    local = mirror / repo_id
    return local.is_dir() and any(local.iterdir())


def load_hub_dataset(repo_id: str, revision: str | None = None):
    """``datasets`` view of a dataset repo through :func:`resolve` (every split, a ``DatasetDict``).

    A mirror folder is read in the layout its publisher chose, with no network and nothing copied:
    parquet shards and card (``push_to_hub``: ``data/<split>-0000k-of-0000n.parquet``), or
    ``save_to_disk`` split folders (``<split>/data-0000k-of-0000n.arrow`` + ``state.json`` +
    ``dataset_info.json``, with or without a ``dataset_dict.json``; the ``Aleksandar/NearID-<source>``
    distractors) memory-mapped by ``datasets.load_from_disk``."""
    import datasets

    r = resolve(repo_id, "dataset", revision)
    if r.local:
        # The NearID cards declare their split by name only (no num_examples), which the default
        # split-size verification rejects; the loaders check columns, ids and views themselves.
        # The shards are named by path: ``load_dataset(<folder>)`` keys its cache by the folder's
        # *name*, so two folders called Aleksandar/NearID (a fixture, a real download) would share it.
        files = parquet_splits(r.source)
        if files:
            return datasets.load_dataset("parquet", data_files=files, verification_mode="no_checks")
        folders = arrow_splits(r.source)
        if folders:
            return datasets.DatasetDict({k: datasets.load_from_disk(v) for k, v in folders.items()})
        return datasets.load_dataset(r.source, verification_mode="no_checks")
    return datasets.load_dataset(repo_id, revision=r.revision)


def arrow_splits(folder: str | os.PathLike) -> dict[str, str]:
    """``{split: folder}`` of a ``save_to_disk`` dataset in ``folder``: each direct subfolder with a
    ``state.json`` and ``dataset_info.json`` (``DatasetDict.save_to_disk`` writes one per split,
    beside ``dataset_dict.json``), or ``folder`` itself as one split ``train`` when it is a
    ``Dataset.save_to_disk`` folder; empty when it is neither."""
    root = Path(folder)

    def is_split(d: Path) -> bool:
        return (d / "state.json").is_file() and (d / "dataset_info.json").is_file()

    if is_split(root):
        return {"train": str(root.resolve())}
    return {d.name: str(d.resolve()) for d in sorted(root.iterdir())
            if d.is_dir() and not d.name.startswith(".") and is_split(d)}


_SHARD = re.compile(r"^(?P<split>[A-Za-z0-9_.]+?)-\d{5}-of-\d{5}\.parquet$")


def parquet_splits(folder: str | os.PathLike) -> dict[str, list[str]]:
    """``{split: [parquet shard paths]}`` of a dataset folder in the hub's layout
    (``data/<split>-00000-of-00001.parquet``, or ``<split>/*.parquet``); empty when it has none."""
    root = Path(folder)
    out: dict[str, list[str]] = {}
    for f in sorted(root.rglob("*.parquet")):
        rel = f.relative_to(root)
        if rel.parts[0].startswith("."):
            continue                                 # .cache/huggingface of hf download
        m = _SHARD.match(f.name)
        split = m.group("split") if m else (f.parent.name if f.parent != root and f.parent.name != "data"
                                            else f.stem.split("-")[0])
        out.setdefault(split, []).append(str(f.resolve()))
    return out


def reads() -> dict[str, dict[str, Any]]:
    """The repositories resolved in this process so far: ``{repo_id: {repo_type, source, path,
    revision}}`` (what each table's provenance sidecar records)."""
    return {k: dict(v) for k, v in sorted(_READS.items())}


def clear_reads() -> None:
    """Forget the recorded reads (tests)."""
    _READS.clear()


def main(argv: list[str] | None = None) -> int:
    """``python -m nearid_lib.hub [MIRROR [DOWNLOADS]]``: print the download commands of every
    repository of the paper profile (:func:`download_commands`) into ``MIRROR`` (default
    ``$NEARID_HUB_DIR``) and ``DOWNLOADS`` (default ``$NEARID_DOWNLOADS``); pipe them to ``bash -e``
    on a machine with internet.

    ``python -m nearid_lib.hub download MIRROR [--downloads DIR] [--only REPO ...]``: download them
    from Python (resumable), one line per repository with its size and commit; exit status 1 on
    the first failure."""

    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["download"]:
        ap = argparse.ArgumentParser(prog="python -m nearid_lib.hub download")
        ap.add_argument("mirror", help="the local hub mirror (NEARID_HUB_DIR)")
        ap.add_argument("--downloads", default=os.environ.get("NEARID_DOWNLOADS") or None,
                        help="where the GitHub releases go (default $NEARID_DOWNLOADS; unset: not cloned)")
        ap.add_argument("--only", nargs="+", default=None, help="only these repositories")
        a = ap.parse_args(args[1:])
        try:
            download_all(a.mirror, a.downloads, a.only)
        except DownloadError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    mirror = args[0] if args else (os.environ.get(HUB_DIR_ENV) or None)
    downloads = args[1] if len(args) > 1 else (os.environ.get("NEARID_DOWNLOADS") or None)
    print("set -e")
    for used_for, cmd in download_commands(mirror, downloads):
        print(f"# {used_for}")
        print(cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
