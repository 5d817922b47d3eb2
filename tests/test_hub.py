"""The one hub resolver (``nearid_lib.hub``), skipped tables and the dry run's table check."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from nearid_lib import hub
from tools.paper_fixtures import SIZE_OVERRIDES, check_tables, overrides_text
from nearid_lib.io_utils import skip_reason


pytestmark = pytest.mark.usefixtures("clean_hub")          # tests/conftest.py


def _repo(mirror, repo_id, commit=None):
    d = mirror / repo_id
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    if commit:
        meta = d / ".cache" / "huggingface" / "download"
        meta.mkdir(parents=True)
        (meta / "config.json.metadata").write_text(f"{commit}\netag\n1700000000.0\n")
    return d


def test_mirror_layout_revision_and_reads(tmp_path, monkeypatch):
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path))
    d = _repo(tmp_path, "org/model", commit="abc123")
    r = hub.resolve("org/model")
    assert r.local and r.path == d.resolve() and r.revision == "abc123"
    path, kw = hub.model_source("org/model")
    assert path == str(d.resolve()) and kw == {}              # a mirror folder needs no revision
    assert hub.reads() == {"org/model": {"repo_type": "model", "source": "mirror", "path": str(d.resolve()),
                                         "revision": "abc123"}}
    # a folder without download metadata: revision unknown (None), never invented
    _repo(tmp_path, "org/plain")
    assert hub.resolve("org/plain").revision is None
    assert hub.is_available("org/plain") and not hub.is_available("org/absent")


def test_missing_repo_names_the_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path))
    with pytest.raises(hub.HubError) as err:
        hub.resolve("Aleksandar/NearID", "dataset")
    msg = str(err.value)
    assert "Aleksandar/NearID" in msg and str(tmp_path) in msg
    assert f"hf download Aleksandar/NearID --repo-type dataset --local-dir {tmp_path}/Aleksandar/NearID" in msg
    (tmp_path / "org" / "empty").mkdir(parents=True)           # an empty folder is not a download
    with pytest.raises(hub.HubError, match="org/empty"):
        hub.resolve("org/empty")
    assert hub.reads() == {}
    with pytest.raises(ValueError, match="repo_type"):
        hub.resolve("org/x", "space")


def test_without_mirror_the_hub_id_and_pinned_revision(monkeypatch, tmp_path):
    monkeypatch.setitem(hub.REVISIONS, "org/pinned", "deadbeef")
    r = hub.resolve("org/pinned")
    assert not r.local and r.source == "org/pinned" and r.revision == "deadbeef"
    assert hub.model_source("org/pinned") == ("org/pinned", {"revision": "deadbeef"})
    assert "--revision deadbeef" in hub.download_command("org/pinned")
    assert hub.model_source("org/free") == ("org/free", {})
    # an existing local path is taken as it is, mirror or not
    own = _repo(tmp_path, "mine/ckpt")
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "elsewhere"))
    assert hub.resolve(str(own)).source == str(own.resolve())


def test_paper_repos_are_unique_and_typed():
    ids = [r[0] for r in hub.PAPER_REPOS]
    assert len(ids) == len(set(ids))
    assert {r[1] for r in hub.PAPER_REPOS} <= {"model", "dataset"}
    assert all(r[2] for r in hub.PAPER_REPOS)


def test_dataset_mirror_read_and_recorded(tmp_path, monkeypatch):
    from tools.paper_fixtures.nearid import write_nearid_datasets

    write_nearid_datasets(tmp_path, n_ids=4, n_mtg=(2, 2))
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path))
    ds = hub.load_hub_dataset("abdo-eldesokey/mtg-dataset")
    assert set(ds) == {"train", "test"} and len(ds["test"]) == 2
    assert hub.reads()["abdo-eldesokey/mtg-dataset"]["revision"] == "dryrun-fixture"


def test_run_provenance_and_skipped_tables(tmp_path, monkeypatch):
    from nearid_lib.report import render_report
    from nearid_lib.run import start_run

    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "hub"))
    _repo(tmp_path / "hub", "org/model", commit="c0ffee")
    hub.resolve("org/model")
    run = start_run("smoke", 0, "test_hub")
    path = run.write_table(pd.DataFrame({"a": [1]}), "04_table1_main")
    meta = json.loads(path.with_name("04_table1_main.meta.json").read_text())
    assert meta["hub"]["org/model"]["revision"] == "c0ffee"
    with pytest.raises(ValueError, match="reason"):
        run.skip_table("04_table2_dbpp", "  ")
    run.skip_table("04_table2_dbpp", "DreamBench++ not found at /x")
    assert skip_reason(run.tables / "04_table2_dbpp.csv") == "DreamBench++ not found at /x"
    text = render_report(run.figures)
    assert "_Ours: skipped in this run (`tables/04_table2_dbpp.csv`): DreamBench++ not found at /x_" in text
    # writing the table later removes the marker
    run.write_table(pd.DataFrame({"a": [1]}), "04_table2_dbpp")
    assert skip_reason(run.tables / "04_table2_dbpp.csv") is None


def test_dryrun_overrides_are_sizes_only(monkeypatch):
    from nearid_lib.config import env_overrides, get_profile

    text = overrides_text()
    assert all(f"{k}={v}" in text for k, v in SIZE_OVERRIDES.items())
    base = get_profile("paper")
    small = get_profile("paper", SIZE_OVERRIDES)
    assert small.world.source == base.world.source == "released"
    # no override names a model, a repository, a code path or a switch
    for k, v in SIZE_OVERRIDES.items():
        assert not any(w in k for w in ("source", "repo", "model", "name", "judge", "standin", "tiny", "loss")), k
        assert v.replace(",", "").replace(".", "").replace("[", "").replace("]", "").replace("-", "").isdigit(), (k, v)
    monkeypatch.setenv("NEARID_SET", text)                    # what make dryrun-paper passes
    assert get_profile("paper", env_overrides()) == small


def test_check_tables_finds_missing_nan_and_accepts_only_gated_skips(tmp_path, monkeypatch):
    """A paper table is written with values, or skipped (or a metric column left empty) for a
    declared gate (nearid_lib.gates) whose input is absent now; any other skip fails the check."""
    from nearid_lib.report import load_specs

    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path / "downloads"))       # no hand download
    figs = tmp_path / "figs"
    problems = check_tables(figs)

    def produced_in(s):
        return json.loads(s.paper_csv.with_name(f"{s.key}.meta.json").read_text()).get("produced_in") or []

    paper_specs = [s for s in load_specs() if s.ours and "paper" in produced_in(s)]
    n_also = sum(len(s.also) for s in paper_specs)
    assert len(problems) == len(paper_specs) + n_also and all("neither written nor skipped" in p for p in problems)
    spec = next(s for s in paper_specs if s.key == "nearid_table1_main")
    ours = figs / spec.ours
    ours.parent.mkdir(parents=True)
    paper = pd.read_csv(spec.paper_csv)
    pd.DataFrame({"nearid_ssr": [np.nan, np.nan]}).to_csv(ours, index=False)
    assert any("column 'nearid_ssr'" in p and "no finite value" in p for p in check_tables(figs))
    full = {m: [0.5] for m in spec.metrics if m in paper}
    pd.DataFrame(full).to_csv(ours, index=False)
    assert not any(spec.key + ":" in p for p in check_tables(figs))
    # the DB++ column may stay empty while DreamBench++ is absent (gate "dreambenchpp"), not after
    pd.DataFrame({**full, "dbpp_mh": [np.nan]}).to_csv(ours, index=False)
    assert not any(spec.key + ":" in p for p in check_tables(figs))
    (tmp_path / "downloads" / "dreambenchpp").mkdir(parents=True)
    assert any("column 'dbpp_mh'" in p for p in check_tables(figs))
    # a whole table skipped: only for a gate that names it and whose input is absent
    ours.unlink()
    ours.with_name(ours.name[:-4] + ".skipped.json").write_text(json.dumps({"reason": "no data"}))
    assert any(spec.key + ":" in p and "without a closed gate" in p for p in check_tables(figs))
    t2 = next(s for s in paper_specs if s.key == "nearid_table2_dbpp")
    marker = (figs / t2.ours).with_name("04_table2_dbpp.skipped.json")
    marker.write_text(json.dumps({"reason": "DreamBench++ not found"}))
    assert any("nearid_table2_dbpp: tables/04_table2_dbpp.csv skipped without a closed gate" in p
               for p in check_tables(figs))                              # DreamBench++ is there now
    (tmp_path / "downloads" / "dreambenchpp").rmdir()
    assert not any("04_table2_dbpp.csv" in p for p in check_tables(figs))


def test_two_mirrors_with_the_same_repo_name_never_share_a_cache(tmp_path, monkeypatch):
    """``load_dataset(<folder>)`` keys its cache by the folder name; the resolver reads shards by path."""
    from tools.paper_fixtures.nearid import write_nearid_datasets

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    write_nearid_datasets(tmp_path / "a", n_ids=4, n_mtg=(2, 2))
    write_nearid_datasets(tmp_path / "b", n_ids=6, n_mtg=(3, 1))
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "a"))
    a = hub.load_hub_dataset("abdo-eldesokey/mtg-dataset")
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "b"))
    b = hub.load_hub_dataset("abdo-eldesokey/mtg-dataset")
    assert (len(a["train"]), len(a["test"])) == (2, 2) and (len(b["train"]), len(b["test"])) == (3, 1)
    assert hub.parquet_splits(tmp_path / "b" / "Aleksandar" / "NearID") == {
        "train": [str((tmp_path / "b" / "Aleksandar" / "NearID" / "data" / "train-00000-of-00001.parquet").resolve())]}
    assert hub.parquet_splits(tmp_path / "empty") == {}


def test_download_command_list_and_readme(capsys):
    from pathlib import Path

    from nearid_lib.hub.__main__ import main

    assert main(["/mirror"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "set -e"                   # a failed download stops the script
    cmds = [ln for ln in out if ln.startswith("hf ")]
    assert len(cmds) == len(hub.PAPER_REPOS)
    records = [ln for ln in out if "nearid_lib.hub record" in ln]
    assert len(records) == len(hub.PAPER_REPOS)
    clones = [ln for ln in out if "git -C" in ln]
    assert len(clones) == len(hub.GIT_REPOS)
    assert f"fetch -q --depth 1 https://github.com/Gorluxor/NearID {hub.GIT_COMMITS['Gorluxor/NearID']}" in clones[0]
    assert "$NEARID_DOWNLOADS/NearID" in clones[0]
    assert "hf download Aleksandar/NearID --repo-type dataset --local-dir /mirror/Aleksandar/NearID" in cmds
    # only the diffusers folders of FLUX.1 (the single-file copy beside them is not loaded)
    flux = next(c for c in cmds if "FLUX.1-Fill-dev" in c)
    assert "--include 'transformer/*'" in flux and "flux1-fill-dev" not in flux
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text() + (root / "docs" / "paper-profile.md").read_text()
    import re

    listed = set(re.findall(r"`([\w.-]+/[\w.-]+)`", readme))
    for org_name, alts in re.findall(r"`([\w.-]+/[\w.-]+-)\{([\w.,-]+)\}`", readme):   # NearID-{Flux,...}
        listed |= {org_name + a for a in alts.split(",")}
    missing = [r for r, _, _ in hub.PAPER_REPOS if r not in listed]
    assert not missing, f"the paper-profile guide (docs/paper-profile.md) does not list {missing}"


def test_every_printed_command_runs_an_executable_that_parses_its_flags(tmp_path):
    """The printed download lines name executables that exist (``hf`` in the venv beside this
    python, ``git`` on PATH) and flags those executables accept: each ``hf download`` line runs with
    ``--dry-run`` offline and must fail *after* parsing (an offline dry-run error, never click's
    usage error, exit status 2); each ``record`` line records a folder; each git line checks a local
    repository out at its commit for real, and again when the clone is at another commit."""
    import os
    import shlex
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    hf = Path(sys.executable).with_name("hf")
    assert hf.exists(), f"{hf} missing: the locked huggingface-hub installs the `hf` client"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    seen_flags = set()
    git = shutil.which("git")
    assert git, "git is not on PATH"
    src = tmp_path / "src"
    subprocess.run([git, "init", "-q", str(src)], check=True)
    heads = []
    for text in ("x", "y"):
        (src / "README.md").write_text(text)
        subprocess.run([git, "-C", str(src), "add", "."], check=True)
        subprocess.run([git, "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text],
                       check=True)
        heads.append(subprocess.run([git, "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip())
    for _, cmd in hub.download_commands(tmp_path / "mirror", tmp_path / "downloads"):
        if cmd.startswith("hf "):
            argv = shlex.split(cmd)
            flags = tuple(sorted({a for a in argv if a.startswith("--")}))
            if flags in seen_flags:              # one run per distinct flag set (each takes ~0.5 s)
                continue
            seen_flags.add(flags)
            r = subprocess.run([str(hf), *argv[1:], "--dry-run"], env=env, capture_output=True, text=True,
                               timeout=120)
            assert r.returncode not in (0, 2), (cmd, r.returncode, r.stderr[-2000:])
            assert "No such option" not in r.stderr and "Usage:" not in r.stderr, (cmd, r.stderr[-2000:])
            assert "offline" in r.stderr.lower() or "DryRunError" in r.stderr, r.stderr[-2000:]
        elif "nearid_lib.hub record" in cmd:
            if "Aleksandar/NearID " not in cmd + " ":
                continue
            folder = tmp_path / "mirror" / "Aleksandar" / "NearID"
            folder.mkdir(parents=True)
            (folder / "README.md").write_text("card")
            argv = shlex.split(cmd)
            r = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=120,
                               env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
            assert r.returncode == 0, r.stderr
            rec = json.loads((tmp_path / "mirror" / ".nearid-downloads" / "Aleksandar" / "NearID.json").read_text())
            assert rec["files"] == {"README.md": 4} and rec["type"] == "dataset"
        else:
            for want in heads:                   # a fresh clone at one commit, then moved to the other
                local = cmd.replace("https://github.com/Gorluxor/NearID", f"file://{src}").replace(
                    hub.GIT_COMMITS["Gorluxor/NearID"], want)
                r = subprocess.run(["bash", "-ec", local], capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, (local, r.stderr)
                got = subprocess.run([git, "-C", str(tmp_path / "downloads" / "NearID"), "rev-parse", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()
                assert got == want
    assert {("--local-dir", "--repo-type"), ("--exclude", "--local-dir"), ("--exclude", "--include", "--local-dir")} \
        <= seen_flags


def _doc_repo_ids(text, root):
    """The backticked ``org/name`` ids of ``text`` (paths of this repository left out)."""
    import re

    return {t for t in re.findall(r"`([\w.-]+/[\w.-]+)`", text) if not (root / t).exists()}


def test_the_gated_repositories_are_one_list_the_docs_give():
    """``mirror.GATED`` is what the guide's "Gated repositories" list names (no more, no fewer), every
    repository a doc or a registry entry calls gated is in it, and each is a repository the project reads."""
    import re
    from pathlib import Path

    from nearid_lib import mirror
    from nearid_lib.generate.specs import DEFAULT_HUB_IDS

    root = Path(__file__).resolve().parents[1]
    guide = (root / "docs" / "paper-profile.md").read_text()
    m = re.search(r"^- \*\*Gated repositories\*\*(.*?)(?=^- \*\*|^\S)", guide, re.S | re.M)
    assert m, "docs/paper-profile.md lost its 'Gated repositories' list"
    listed = _doc_repo_ids(m.group(1), root)
    assert listed == set(mirror.GATED), (f"in the guide, not in mirror.GATED: {sorted(listed - mirror.GATED)}; "
                                         f"in mirror.GATED, not in the guide: {sorted(mirror.GATED - listed)}")
    # anywhere else: `org/name` (gated ...) in a doc, "gated" in a registry entry's use
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    called = {r for p in docs for r in re.findall(r"`([\w.-]+/[\w.-]+)`\s*\((?:[^)]*\s)?gated", p.read_text())}
    called |= {r for r, _, used_for in hub.PAPER_REPOS if "gated" in used_for.lower()}
    assert called and called <= mirror.GATED, sorted(called - mirror.GATED)
    assert mirror.GATED <= {r for r, _, _ in hub.PAPER_REPOS} | set(DEFAULT_HUB_IDS.values())
    # the download list gives every gated repository of the registry its login hint
    hinted = {cmd.split()[2] for use, cmd in hub.download_commands("/m") if cmd.startswith("hf download")
              and "is gated" in use}
    assert hinted == mirror.GATED & {r for r, _, _ in hub.PAPER_REPOS}
    assert "facebook/dinov3-vitb16-pretrain-lvd1689m" in hinted


def test_the_judge_scales_can_be_downloaded_by_name(tmp_path):
    """Every judge of NearID Table 7 (judge.plan.JUDGE_MODELS) is a registry entry, so the fix the judge
    gates print (``download $MIRROR --only <judge>``) is accepted, with the default fetch policy."""
    from nearid_lib import mirror
    from nearid_lib.hub.download import download_all
    from nearid_lib.judge.plan import JUDGE_MODELS

    calls = []

    def fetch(**kw):                             # a stand-in hub listing no file (a dry run reads nothing more)
        calls.append(kw["repo_id"])
        return []

    registry = {r: t for r, t, _ in hub.PAPER_REPOS}
    for judge in JUDGE_MODELS:
        assert registry.get(judge) == "model", f"{judge} is not in hub.PAPER_REPOS"
        assert mirror.fetch_policy(judge).allow is None and judge in mirror.KNOWN_SIZES
    done, failed = download_all(tmp_path / "m", repos=list(JUDGE_MODELS), fetch=fetch, log=lambda s: None,
                                dry_run=True)
    assert failed == [] and sorted(d["repo"] for d in done) == sorted(calls) == sorted(JUDGE_MODELS)


def test_help_prints_usage_and_unknown_options_are_usage_errors(capsys, monkeypatch):
    from nearid_lib.hub.__main__ import main

    monkeypatch.delenv(hub.HUB_DIR_ENV, raising=False)
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as ex:
            main([flag])
        assert ex.value.code == 0
        out = capsys.readouterr()
        assert out.out.startswith("usage: python -m nearid_lib.hub") and "set -e" not in out.out
        assert "download" in out.out and "record" in out.out and "--local-dir" not in out.out
    for bad in (["--bogus"], ["-x"], ["/mirror", "--bogus"]):
        with pytest.raises(SystemExit) as ex:
            main(bad)
        assert ex.value.code == 2, bad
        err = capsys.readouterr()
        assert "unrecognized arguments" in err.err and err.out == ""
    with pytest.raises(SystemExit) as ex:
        main(["download", "--help"])
    assert ex.value.code == 0 and "--dry-run" in capsys.readouterr().out
    # the default form still prints the script, MIRROR and DOWNLOADS as given
    assert main(["/mirror", "/dl"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("set -e") and "--local-dir /mirror/Aleksandar/NearID" in out and "/dl/NearID" in out
