"""Downloads into the mirror (``python -m nearid_lib.hub download``): past failures, only the files
the pipeline loads, records the preflight checks, the authors' clone at its commit. The network is
replaced by an injected ``fetch`` (``snapshot_download``'s signature, dry runs included) and the
GitHub URL by a local repository (an injected ``run``)."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from nearid_lib import hub, mirror
from nearid_lib.hub.__main__ import main
from nearid_lib.hub.download import DownloadError, download_all


pytestmark = pytest.mark.usefixtures("clean_hub")          # tests/conftest.py


@dataclass
class Info:
    filename: str
    file_size: int
    commit_hash: str


class GatedRepoError(Exception):
    """Named as huggingface_hub's: what a gated repository answers without access."""


class FakeHub:
    """``snapshot_download`` over an in-memory hub: ``repos[id] = {file: bytes}`` at ``commit``;
    ``gated`` repositories refuse; ``short`` repositories write one file truncated."""

    def __init__(self, repos, commit="c0ffee", gated=(), short=()):
        self.repos, self.commit, self.gated, self.short = repos, commit, set(gated), set(short)
        self.calls = []

    def _files(self, repo_id, allow, ignore):
        out = {}
        for f, data in self.repos.get(repo_id, {"README.md": b"x"}).items():
            if allow is not None and not any(fnmatch(f, p) for p in allow):
                continue
            if any(fnmatch(f, p) for p in ignore or ()):
                continue
            out[f] = data
        return out

    def __call__(self, repo_id, repo_type, local_dir, revision=None, allow_patterns=None, ignore_patterns=None,
                 dry_run=False):
        self.calls.append({"repo": repo_id, "type": repo_type, "revision": revision, "dry_run": dry_run,
                           "allow": allow_patterns, "ignore": ignore_patterns})
        if repo_id in self.gated:
            raise GatedRepoError(f"401 Client Error: access to {repo_id} is restricted (gated)")
        files = self._files(repo_id, allow_patterns, ignore_patterns)
        commit = revision or self.commit
        if dry_run:
            return [Info(f, len(d), commit) for f, d in files.items()]
        for i, (f, d) in enumerate(files.items()):
            p = Path(local_dir) / f
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(d[:-1] if repo_id in self.short and i == 0 else d)
        return local_dir


FLUX = "black-forest-labs/FLUX.1-Fill-dev"
CLIP = "openai/clip-vit-large-patch14"
DINO3 = "facebook/dinov3-vitl16-pretrain-lvd1689m"
REPOS = {
    "Aleksandar/NearID": {"README.md": b"card", "data/train-00000-of-00001.parquet": b"p" * 100},
    FLUX: {"model_index.json": b"{}", "transformer/diffusion_pytorch_model.safetensors": b"w" * 50,
           "flux1-fill-dev.safetensors": b"w" * 50, "ae.safetensors": b"a" * 10, "vae/config.json": b"{}"},
    CLIP: {"config.json": b"{}", "model.safetensors": b"m" * 20, "pytorch_model.bin": b"m" * 20,
           "tf_model.h5": b"t" * 20, "flax_model.msgpack": b"f" * 20},
}


def test_only_the_files_the_pipeline_loads_and_a_record_each(tmp_path):
    fake, lines = FakeHub(REPOS), []
    done, failed = download_all(tmp_path / "m", repos=["Aleksandar/NearID", FLUX, CLIP], fetch=fake, log=lines.append)
    assert failed == [] and [d["repo"] for d in done] == ["Aleksandar/NearID", CLIP, FLUX]   # PAPER_REPOS order
    # FLUX: the diffusers folders, not the single-file copy beside them; CLIP: safetensors only
    assert mirror.scan_files(tmp_path / "m" / FLUX) == {"model_index.json": 2, "vae/config.json": 2,
                                                        "transformer/diffusion_pytorch_model.safetensors": 50}
    assert set(mirror.scan_files(tmp_path / "m" / CLIP)) == {"config.json", "model.safetensors"}
    rec = mirror.read_record(tmp_path / "m", FLUX)
    assert rec["revision"] == "c0ffee" and rec["bytes"] == 54 and rec["files"]["model_index.json"] == 2
    assert rec["allow"] and "transformer/*" in rec["allow"]
    # each repository: a plan (dry run) then the download of exactly that commit
    flux = [c for c in fake.calls if c["repo"] == FLUX]
    assert [c["dry_run"] for c in flux] == [True, False] and flux[1]["revision"] == "c0ffee"
    assert any("Aleksandar/NearID" in ln and "commit c0ffee" in ln for ln in lines)
    # the recorded commit is what a load reports (table sidecars), and a record check is clean
    import os
    os.environ[hub.HUB_DIR_ENV] = str(tmp_path / "m")
    try:
        assert hub.resolve(FLUX).revision == "c0ffee" and hub.peek_revision(FLUX) == "c0ffee"
    finally:
        del os.environ[hub.HUB_DIR_ENV]
    assert mirror.check_record(tmp_path / "m" / FLUX, rec) == []
    (tmp_path / "m" / FLUX / "vae" / "config.json").unlink()
    (tmp_path / "m" / FLUX / "model_index.json").write_bytes(b"{")
    bad = mirror.check_record(tmp_path / "m" / FLUX, rec)
    assert "1 recorded file(s) missing: vae/config.json" in bad[0] and "model_index.json (1 bytes, recorded 2)" in bad[1]


def test_a_gated_or_broken_repository_does_not_stop_the_others(tmp_path, capsys):
    fake = FakeHub(REPOS, gated={DINO3}, short={CLIP})
    lines = []
    want = ["Aleksandar/NearID", CLIP, DINO3, FLUX]
    done, failed = download_all(tmp_path / "m", repos=want, fetch=fake, log=lines.append)
    assert [d["repo"] for d in done] == ["Aleksandar/NearID", FLUX]          # before and after the failures
    assert len(failed) == 2
    clip = next(f for f in failed if CLIP in f)
    assert "other size than recorded" in clip                               # a truncated transfer is caught
    gated = next(f for f in failed if DINO3 in f)
    assert "GatedRepoError" in gated and "hf auth login" in gated and "HF_TOKEN" in gated
    assert f"https://huggingface.co/{DINO3}" in gated
    assert mirror.read_record(tmp_path / "m", CLIP) is None                 # no record of a failed download
    # the command line lists every failure at the end and exits 1
    import nearid_lib.hub.__main__ as cli

    orig = cli.download_all
    cli.download_all = lambda *a, **k: orig(*a, fetch=fake, log=print, **k)
    try:
        rc = main(["download", str(tmp_path / "m2"), "--only", *want])
    finally:
        cli.download_all = orig
    out = capsys.readouterr()
    assert rc == 1 and "2 FAILED" in out.out and out.err.count("failed: ") == 2


def test_only_skip_update_and_dry_run(tmp_path):
    fake = FakeHub(REPOS)
    done, _ = download_all(tmp_path / "m", repos=["Aleksandar/NearID", CLIP], skip=[CLIP], fetch=fake, log=print)
    assert [d["repo"] for d in done] == ["Aleksandar/NearID"]
    with pytest.raises(DownloadError, match="unknown repositories"):
        download_all(tmp_path / "m", repos=["no/such"], fetch=fake)
    with pytest.raises(DownloadError, match="unknown repositories"):
        download_all(tmp_path / "m", skip=["no/such"], fetch=fake)
    # a second download reads the commit the first recorded, unless --update
    fake2 = FakeHub(REPOS, commit="beef")
    download_all(tmp_path / "m", repos=["Aleksandar/NearID"], fetch=fake2, log=print)
    assert fake2.calls[0]["revision"] == "c0ffee" and mirror.read_record(tmp_path / "m", "Aleksandar/NearID")[
        "revision"] == "c0ffee"
    download_all(tmp_path / "m", repos=["Aleksandar/NearID"], fetch=fake2, log=print, update=True)
    assert fake2.calls[-2]["revision"] is None and mirror.read_record(tmp_path / "m", "Aleksandar/NearID")[
        "revision"] == "beef"
    # a dry run reports sizes and commits and writes nothing
    fake3, lines = FakeHub(REPOS), []
    done, _ = download_all(tmp_path / "d", repos=[FLUX], fetch=fake3, log=lines.append, dry_run=True)
    assert done[0]["bytes"] == 54 and all(c["dry_run"] for c in fake3.calls) and not (tmp_path / "d").exists()
    assert "(dry run)" in lines[0]


def test_every_registry_entry_gets_a_policy_and_gated_ones_are_listed():
    for repo_id, repo_type, _ in hub.PAPER_REPOS:
        pol = mirror.fetch_policy(repo_id, repo_type)
        assert pol.why and (repo_type == "model" or pol.ignore == () or repo_id in mirror.POLICIES)
    # a repository added to the registry later gets the default, whatever its name
    assert mirror.fetch_policy("new/model").allow is None and "*.h5" in mirror.fetch_policy("new/model").ignore
    assert mirror.fetch_policy("new/data", "dataset").ignore == ()
    # every gated repository is one the project reads (the registry, or the opt-in distractor regeneration)
    from nearid_lib.generate.specs import DEFAULT_HUB_IDS

    assert mirror.GATED <= {r for r, _, _ in hub.PAPER_REPOS} | set(DEFAULT_HUB_IDS.values())
    assert "hf auth login" in mirror.login_hint(DINO3)


def _git(*args, cwd=None):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_authors_clone_at_its_commit_and_moved_when_it_differs(tmp_path):
    src = tmp_path / "src"
    _git("init", "-q", str(src))
    heads = []
    for t in ("a", "b"):
        (src / "splits").mkdir(exist_ok=True)
        (src / "splits" / "test.json").write_text(f"[{len(heads)}]")
        _git("-C", str(src), "add", ".")
        _git("-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", t)
        heads.append(_git("-C", str(src), "rev-parse", "HEAD"))
    seen = []

    def run(argv, **kw):            # the injected runner: GitHub is the local repository
        argv = [str(src) if a == "https://github.com/Gorluxor/NearID" else a for a in argv]
        seen.append(argv)
        return subprocess.run(argv, **kw)

    dl = tmp_path / "downloads"
    download_all(tmp_path / "m", dl, repos=["Gorluxor/NearID"], run=run, git_commits={"Gorluxor/NearID": heads[0]},
                 log=print)
    assert _git("-C", str(dl / "NearID"), "rev-parse", "HEAD") == heads[0]
    assert (dl / "NearID" / "splits" / "test.json").read_text() == "[0]"
    rec = mirror.read_record(dl, "Gorluxor/NearID")
    assert rec["revision"] == heads[0] and "splits/test.json" in rec["files"]
    # the recorded commit moves: the existing clone is updated, not kept as it was
    lines = []
    download_all(tmp_path / "m", dl, repos=["Gorluxor/NearID"], run=run, git_commits={"Gorluxor/NearID": heads[1]},
                 log=lines.append)
    assert _git("-C", str(dl / "NearID"), "rev-parse", "HEAD") == heads[1] and "updated" in lines[0]
    n = len(seen)
    download_all(tmp_path / "m", dl, repos=["Gorluxor/NearID"], run=run, git_commits={"Gorluxor/NearID": heads[1]},
                 log=lines.append)
    assert "kept" in lines[-1] and not any("fetch" in a for a in seen[n:])   # at its commit: nothing fetched
    assert hub.GIT_COMMITS["Gorluxor/NearID"].startswith("a01532e")
    # a folder inside another clone (the authors' files copied by hand under a checkout) is no clone
    (src / "copied").mkdir()
    assert mirror.git_head(src / "copied") is None and mirror.git_head(src) == heads[1]


def test_record_a_hand_download(tmp_path, capsys):
    d = tmp_path / "m" / "org" / "model"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "sub" / "w.safetensors").write_bytes(b"x" * 7)
    meta = d / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text("abc123\netag\n0\n")
    assert main(["record", str(tmp_path / "m"), "org/model"]) == 0
    rec = json.loads((tmp_path / "m" / ".nearid-downloads" / "org" / "model.json").read_text())
    assert rec["files"] == {"config.json": 2, "sub/w.safetensors": 7} and rec["revision"] == "abc123"
    (meta / "sub").mkdir()
    (meta / "sub" / "x.incomplete").write_text("")
    assert main(["record", str(tmp_path / "m"), "org/model"]) == 1
    assert "transfers unfinished" in capsys.readouterr().err
