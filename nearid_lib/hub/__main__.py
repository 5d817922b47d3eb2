"""``python -m nearid_lib.hub``: the download commands of the paper profile, the downloads
themselves (``download``) and the record of a download made by hand (``record``); see :func:`main`."""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

from .. import mirror as M
from . import GIT_COMMITS, HUB_DIR_ENV, download_command, download_commands, mirror_revision, repo_type_of
from .download import DownloadError, download_all

__all__ = ["main"]


def _record_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m nearid_lib.hub record",
                                 description="record a download made by hand (hf download) for the preflight: "
                                             "its files, sizes and commit")
    ap.add_argument("mirror", help="the local hub mirror (NEARID_HUB_DIR)")
    ap.add_argument("repo", help="the repository id, e.g. Aleksandar/NearID")
    ap.add_argument("--repo-type", default=None, choices=["model", "dataset"],
                    help="default: its type in PAPER_REPOS (model for any other)")
    return ap


def _download_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m nearid_lib.hub download",
                                 description="download every repository of the paper profile into the mirror "
                                             "(resumable, one line per repository, every failure listed at the end; "
                                             "exit status 1 when any failed)")
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
    return ap


def _commands_parser() -> argparse.ArgumentParser:
    """The default form's parser; its help lists the two subcommands from their own parsers, so the
    help and the parsers cannot drift apart."""
    def sub(p: argparse.ArgumentParser) -> str:
        usage = " ".join(p.format_usage().split()[1:])            # one line, without "usage:"
        return (textwrap.fill(usage, 100, initial_indent="  ", subsequent_indent="      ") + "\n"
                + textwrap.fill(p.description or "", 100, initial_indent="      ", subsequent_indent="      "))

    return argparse.ArgumentParser(
        prog="python -m nearid_lib.hub", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="python -m nearid_lib.hub [-h] [MIRROR [DOWNLOADS]]\n       python -m nearid_lib.hub "
              "{download,record} ... (-h for theirs)",
        description=textwrap.fill("Print the download commands of every repository of the paper profile (hf "
                                  "download, its record for the preflight, the authors' GitHub release) as a "
                                  "script for `bash -e` on a machine with internet.", 100),
        epilog="subcommands:\n" + "\n".join(sub(p) for p in (_download_parser(), _record_parser())))


def main(argv: list[str] | None = None) -> int:
    """``python -m nearid_lib.hub [MIRROR [DOWNLOADS]]``: print the download commands of every
    repository of the paper profile (:func:`download_commands`) into ``MIRROR`` (default
    ``$NEARID_HUB_DIR``) and ``DOWNLOADS`` (default ``$NEARID_DOWNLOADS``), for ``bash -e`` on a
    machine with internet.

    ``python -m nearid_lib.hub download MIRROR [--downloads DIR] [--only REPO ...] [--skip REPO ...]
    [--update] [--dry-run] [--git-commit REPO=SHA]``: download them from Python (:func:`download_all`),
    one line per repository with its size and commit, every failure listed at the end; exit status
    1 when any failed. ``python -m nearid_lib.hub record MIRROR REPO [--repo-type dataset]``: record
    a download made by hand (``hf download``) for the preflight.

    ``-h`` / ``--help`` prints the usage and exits 0; an unknown option is a usage error (exit 2),
    never a mirror path (argparse's ``SystemExit``)."""

    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["record"]:
        a = _record_parser().parse_args(args[1:])
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
        a = _download_parser().parse_args(args[1:])
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
    ap = _commands_parser()
    ap.add_argument("mirror", nargs="?", default=os.environ.get(HUB_DIR_ENV) or None, metavar="MIRROR",
                    help=f"the local hub mirror (default ${HUB_DIR_ENV})")
    ap.add_argument("downloads", nargs="?", default=os.environ.get("NEARID_DOWNLOADS") or None, metavar="DOWNLOADS",
                    help="where the GitHub releases go (default $NEARID_DOWNLOADS)")
    a = ap.parse_args(args)
    print("set -e")
    for used_for, cmd in download_commands(a.mirror, a.downloads):
        print(f"# {used_for}")
        print(cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
