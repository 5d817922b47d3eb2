"""``python -m nearid_lib.hub``: the download commands of the paper profile, the downloads
themselves (``download``) and the record of a download made by hand (``record``); see :func:`main`."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import mirror as M
from . import GIT_COMMITS, HUB_DIR_ENV, download_command, download_commands, mirror_revision, repo_type_of
from .download import DownloadError, download_all

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m nearid_lib.hub [MIRROR [DOWNLOADS]]``: print the download commands of every
    repository of the paper profile (:func:`download_commands`) into ``MIRROR`` (default
    ``$NEARID_HUB_DIR``) and ``DOWNLOADS`` (default ``$NEARID_DOWNLOADS``), for ``bash -e`` on a
    machine with internet.

    ``python -m nearid_lib.hub download MIRROR [--downloads DIR] [--only REPO ...] [--skip REPO ...]
    [--update] [--dry-run] [--git-commit REPO=SHA]``: download them from Python (:func:`download_all`),
    one line per repository with its size and commit, every failure listed at the end; exit status
    1 when any failed. ``python -m nearid_lib.hub record MIRROR REPO [--repo-type dataset]``: record
    a download made by hand (``hf download``) for the preflight."""

    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["record"]:
        ap = argparse.ArgumentParser(prog="python -m nearid_lib.hub record")
        ap.add_argument("mirror")
        ap.add_argument("repo")
        ap.add_argument("--repo-type", default=None, choices=["model", "dataset"])
        a = ap.parse_args(args[1:])
        where = Path(a.mirror) / a.repo
        left = M.incomplete_files(where)
        if not where.is_dir() or left:
            print(f"error: {where}: {'not downloaded' if not where.is_dir() else f'{len(left)} transfers unfinished'}; "
                  f"rerun: {download_command(a.repo, a.repo_type or repo_type_of(a.repo), a.mirror)}", file=sys.stderr)
            return 1
        M.write_record(a.mirror, a.repo, a.repo_type or repo_type_of(a.repo), mirror_revision(where),
                       M.scan_files(where), M.fetch_policy(a.repo, a.repo_type or repo_type_of(a.repo)), recorded_by="hub record (after hf download)")
        return 0
    if args[:1] == ["download"]:
        ap = argparse.ArgumentParser(prog="python -m nearid_lib.hub download")
        ap.add_argument("mirror", help="the local hub mirror (NEARID_HUB_DIR)")
        ap.add_argument("--downloads", default=os.environ.get("NEARID_DOWNLOADS") or None,
                        help="where the GitHub releases go (default $NEARID_DOWNLOADS; unset: not cloned)")
        ap.add_argument("--only", nargs="+", default=None, help="only these repositories")
        ap.add_argument("--skip", nargs="+", default=[], help="every repository but these")
        ap.add_argument("--update", action="store_true",
                        help="the hub's newest commit instead of the one an earlier download recorded")
        ap.add_argument("--dry-run", action="store_true", help="sizes and commits only; nothing downloaded")
        ap.add_argument("--git-commit", action="append", default=[], metavar="REPO=SHA",
                        help=f"check a GitHub release out at SHA (or HEAD) instead of {GIT_COMMITS}")
        a = ap.parse_args(args[1:])
        try:
            commits = dict(kv.split("=", 1) for kv in a.git_commit)
            done, failed = download_all(a.mirror, a.downloads, a.only, skip=a.skip, update=a.update,
                                        dry_run=a.dry_run, git_commits=commits)
        except (DownloadError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        total = sum(d.get("bytes") or 0 for d in done)
        print(f"{len(done)} repositories, {total / 2**30:.2f} GiB" + (f"; {len(failed)} FAILED:" if failed else ""))
        for line in failed:
            print(f"  failed: {line}", file=sys.stderr)
        return 1 if failed else 0
    mirror = args[0] if args else (os.environ.get(HUB_DIR_ENV) or None)
    downloads = args[1] if len(args) > 1 else (os.environ.get("NEARID_DOWNLOADS") or None)
    print("set -e")
    for used_for, cmd in download_commands(mirror, downloads):
        print(f"# {used_for}")
        print(cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
