"""Downloads into the local mirror (:func:`download_all`): every repository of
:data:`nearid_lib.hub.PAPER_REPOS` at the files :func:`nearid_lib.mirror.fetch_policy` names, a
failure (a gated repository without access, a network error) listed and the others fetched, each
finished repository recorded for the preflight; the authors' GitHub releases checked out at
:data:`nearid_lib.hub.GIT_COMMITS`. ``python -m nearid_lib.hub download`` is its command line."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import mirror as M
from . import GIT_COMMITS, GIT_REPOS, PAPER_REPOS, REVISIONS

__all__ = ["DownloadError", "download_all"]


class DownloadError(RuntimeError):
    """A download of :func:`download_all` failed; the message names the repository."""


def _fail_text(repo_id: str, err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    gated = repo_id in M.GATED or type(err).__name__ in ("GatedRepoError", "HfHubHTTPError") and \
        any(c in str(err) for c in ("401", "403", "gated", "Gated"))
    return f"{text}. {M.login_hint(repo_id)}" if gated else text


def _fetch_one(repo_id: str, repo_type: str, where: Path, revision: str | None, fetch: Callable[..., Any],
               dry_run: bool) -> tuple[str | None, dict[str, int | None]]:
    """The hub's file list of ``repo_id`` under its policy (a dry run), then, unless ``dry_run``,
    the download of exactly that commit, checked file by file; ``(commit, {file: size})``."""
    pol = M.fetch_policy(repo_id, repo_type)
    pats = {"allow_patterns": list(pol.allow) if pol.allow else None, "ignore_patterns": list(pol.ignore)}
    plan = fetch(repo_id=repo_id, repo_type=repo_type, local_dir=str(where), revision=revision, dry_run=True, **pats)
    files = {f.filename: f.file_size for f in plan}
    commit = next((f.commit_hash for f in plan), revision)
    if not dry_run:
        fetch(repo_id=repo_id, repo_type=repo_type, local_dir=str(where), revision=commit, **pats)
        bad = M.check_record(where, {"files": files})
        if bad:
            raise DownloadError("; ".join(bad))
    return commit, files


def download_all(mirror: str | os.PathLike, downloads: str | os.PathLike | None = None,
                 repos: Sequence[str] | None = None, log: Callable[[str], None] = print,
                 fetch: Callable[..., Any] | None = None, run: Callable[..., Any] | None = None,
                 skip: Sequence[str] = (), update: bool = False, dry_run: bool = False,
                 git_commits: dict[str, str] | None = None) -> tuple[list[dict], list[str]]:
    """Download every repository of :data:`PAPER_REPOS` (or only ``repos``, less ``skip``) into
    ``mirror`` with ``huggingface_hub.snapshot_download(local_dir=...)``: resumable, only the files
    of :func:`nearid_lib.mirror.fetch_policy`, at the commit an earlier download recorded (the
    hub's newest with ``update``, or the pinned :data:`REVISIONS`), each finished repository
    recorded (:func:`nearid_lib.mirror.write_record`); then the :data:`GIT_REPOS` clones into
    ``downloads`` at :data:`GIT_COMMITS` (or ``git_commits``). A failure does not stop the others.
    Returns ``(records, failures)``, one log line per repository. ``dry_run``: sizes and commits
    only, nothing downloaded. ``fetch`` / ``run`` replace ``snapshot_download`` / ``subprocess.run``."""
    if fetch is None:
        from huggingface_hub import snapshot_download as fetch
    run = run or subprocess.run
    mirror = Path(mirror).expanduser()
    known = {r for r, _, _ in PAPER_REPOS} | {r for r, _, _ in GIT_REPOS}
    asked = set(repos or ()) | set(skip)
    if asked - known:
        raise DownloadError(f"unknown repositories {sorted(asked - known)}; known: {sorted(known)}")
    want = (set(repos) if repos else known) - set(skip)
    done, failures = [], []
    for repo_id, repo_type, _ in PAPER_REPOS:
        if repo_id not in want:
            continue
        where = mirror / repo_id
        old = M.read_record(mirror, repo_id)
        rev = REVISIONS.get(repo_id) or (None if update or not old else old.get("revision"))
        try:
            commit, files = _fetch_one(repo_id, repo_type, where, rev, fetch, dry_run)
        except Exception as err:                       # noqa: BLE001 - named, listed, the others go on
            failures.append(f"{repo_type} {repo_id} -> {where}: {_fail_text(repo_id, err)}")
            log(f"{repo_id:<48} FAILED  {failures[-1]}")
            continue
        size = sum(v or 0 for v in files.values())
        if not dry_run:
            M.write_record(mirror, repo_id, repo_type, commit, files, M.fetch_policy(repo_id, repo_type))
        log(f"{repo_id:<48} {size / 2**30:8.2f} GiB  {len(files):5d} files  commit {commit or '?'}"
            + ("  (dry run)" if dry_run else f"  -> {where}"))
        done.append({"repo": repo_id, "type": repo_type, "path": str(where), "bytes": size, "revision": commit,
                     "files": len(files)})
    commits = {**GIT_COMMITS, **(git_commits or {})}
    for repo, folder, _ in GIT_REPOS if downloads is not None and not dry_run else ():
        if repo not in want:
            continue
        where = Path(downloads).expanduser() / folder
        commit = commits.get(repo)
        try:
            what = M.git_checkout(f"https://github.com/{repo}", where, None if commit in (None, "HEAD") else commit, run)
        except Exception as err:                       # noqa: BLE001
            failures.append(f"git {repo} -> {where}: {type(err).__name__}: {err}")
            log(f"{repo:<48} FAILED  {failures[-1]}")
            continue
        head = M.git_head(where, run)
        M.write_record(downloads, repo, "git", head, M.scan_files(where), None, url=f"https://github.com/{repo}")
        log(f"{repo:<48} git {what}  -> {where}")
        done.append({"repo": repo, "type": "git", "path": str(where), "revision": head})
    return done, failures
