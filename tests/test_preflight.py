"""The preflight (``nearid preflight --profile paper``): a clean fixture mirror passes, and each
defect a real mirror can have is named, with its fix, from metadata alone. The mirror is the dry
run's fixture (published layouts, tiny models, download records), damaged on a hard-linked copy."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nearid_lib import hub
from nearid_lib import mirror as M
from nearid_lib.config import get_profile
from tools.paper_fixtures import SIZE_OVERRIDES, record_mirror
from tools.paper_fixtures.damage import damage
from tools.paper_fixtures.nearid import (write_authors_release, write_disk_repo, write_nearid_datasets,
                                              write_nearid_models)
from nearid_lib.preflight import run_preflight
from nearid_lib.steps.placement import plan_replicas


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("pf")
    write_nearid_datasets(root / "hub", n_ids=18)
    write_nearid_models(root / "hub")
    write_authors_release(root / "dl")
    record_mirror(root / "hub", root / "dl")
    return root


@pytest.fixture
def env(fixture, tmp_path, monkeypatch):
    """A hard-linked copy of the fixture (damage replaces files, so the original stays intact) and the
    environment a paper run on it has; ``allow``: what this light fixture leaves out (FPR, ID-Sim)."""
    for d in ("hub", "dl"):
        shutil.copytree(fixture / d, tmp_path / d, copy_function=os.link)
    for k, v in {"NEARID_HUB_DIR": tmp_path / "hub", "NEARID_DOWNLOADS": tmp_path / "dl",
                 "NEARID_DATA": tmp_path / "data", "NEARID_CACHE": tmp_path / "cache", "NEARID_OUT": tmp_path / "out",
                 "HF_HUB_OFFLINE": "1", "NEARID_ALLOW_CPU": "1", "HF_DATASETS_CACHE": tmp_path / "hfds"}.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("NEARID_SET", raising=False)
    allow = [r for r, _, _ in hub.PAPER_REPOS if not (fixture / "hub" / r).is_dir()]
    return tmp_path, allow


def _cfg(**extra):
    over = {**SIZE_OVERRIDES, **extra}
    over.setdefault("judge.prompt_file", os.environ["NEARID_DOWNLOADS"] + "/NearID/evaluation/vl_template_v2.txt")
    return get_profile("paper", over)


def _problems(rep):
    return [f.line() for f in rep.problems]


def test_a_clean_mirror_passes_in_seconds(env):
    root, allow = env
    rep = run_preflight(_cfg(), allow)
    assert rep.ok, _problems(rep)
    assert rep.seconds < 120                       # the budget; it takes about a second here
    text = "\n".join(rep.lines())
    assert "layout images+masks (card at 1a2cc71), 18 rows, 42 views" in text
    assert "train/val/test = 12/2/4 (split column)" in text
    assert "[disk] token store (int8)" in text
    # every step of the resource ledger, with what one GPU must hold (no GPU here)
    assert "[gpu] train: siglip2-so400m-patch14-384: no GPU (" in text and "[gpu] judge-nearid: " in text
    assert text.splitlines()[-1].startswith("preflight (paper): OK")
    # a repository absent for a declared reason is a note, not a problem
    assert any("absent" in f.what and "--allow-missing" in f.what for f in rep.findings if f.kind == "note")


def test_the_three_defects_of_the_issue_each_named(env):
    """A missing column, a truncated distractor repository, a missing judge template: each named."""
    root, allow = env
    said = damage(root / "hub", root / "dl")
    assert len(said) == 3
    rep = run_preflight(_cfg(), allow)
    probs = _problems(rep)
    assert not rep.ok
    assert any("Aleksandar/NearID: matches no published layout" in p and "lacks ['masks2']" in p for p in probs)
    assert any("NearID-Flux: shard data-00001-of-00002.arrow listed in state.json is missing" in p for p in probs)
    assert any("NearID-Flux: 1 recorded file(s) missing" in p and "--only Aleksandar/NearID-Flux" in p for p in probs)
    assert any("judge.prompt_file=" in p and "does not exist" in p and "--only Gorluxor/NearID" in p for p in probs)


@pytest.mark.parametrize("defect, expect", [
    ("repo", "google/siglip2-so400m-patch14-384 (model: frozen backbone of NearID) is not in the mirror"),
    ("split", "test.json, entry 4: row 1 already listed"),
])
def test_more_defects_named(env, defect, expect):
    root, allow = env
    damage(root / "hub", root / "dl", [defect])
    probs = _problems(run_preflight(_cfg(), allow))
    assert any(expect in p for p in probs), probs
    assert all(" -- fix: " in p for p in probs)


def test_rows_out_of_line_and_bytes_cut_short(env):
    root, allow = env
    import datasets

    # a distractor repository in another row order (its own record says it is complete)
    src = root / "hub" / "Aleksandar" / "NearID-SDXL"
    ds = datasets.load_from_disk(str(src / "train"))
    feats, cols = ds.features, ds[::-1]
    shutil.rmtree(src)
    write_disk_repo(src, cols, feats, "card")
    M.write_record(root / "hub", "Aleksandar/NearID-SDXL", "dataset", "x", M.scan_files(src))
    # a shard cut in half (the record notices the size, the reader the torn stream)
    shard = sorted((root / "hub" / "Aleksandar" / "NearID-Qwen" / "train").glob("*.arrow"))[0]
    data = shard.read_bytes()
    shard.unlink()
    shard.write_bytes(data[: len(data) // 2])
    probs = _problems(run_preflight(_cfg(), allow))
    ids = json.loads("[" + ",".join(str(i) for i in ds["id"]) + "]")
    assert any(f"NearID-SDXL, row 0, field 'id': {ids[-1]} but Aleksandar/NearID row 0 has id {ids[0]}" in p
               for p in probs), probs
    assert any("NearID-Qwen" in p and "cannot be read (truncated?)" in p for p in probs)
    assert any("NearID-Qwen" in p and "of another size than recorded" in p for p in probs)


def test_records_weights_and_gated_repositories(env):
    root, allow = env
    (root / "hub" / ".nearid-downloads" / "openai" / "clip-vit-large-patch14.json").unlink()
    for f in (root / "hub" / "facebook" / "dinov2-large").glob("*.safetensors"):
        f.unlink()
    M.write_record(root / "hub", "facebook/dinov2-large", "model", "x", M.scan_files(root / "hub" / "facebook" / "dinov2-large"))
    gated = "facebook/dinov3-vitl16-pretrain-lvd1689m"
    rep = run_preflight(_cfg(), [r for r in allow if r != gated])
    probs = _problems(rep)
    assert any("openai/clip-vit-large-patch14: no download record" in p and "nearid_lib.hub record" in p for p in probs)
    assert any("facebook/dinov2-large: no weight file" in p for p in probs)
    # DINOv3 is gated: absent, it is a note when a gate declares it (its tables are skipped), with the gate named
    notes = [f.what for f in rep.findings if f.kind == "note"]
    assert any(gated in n and "gate 'dinov3'" in n for n in notes)


def test_clipseg_needed_only_for_views_without_a_released_mask(env, tmp_path_factory, monkeypatch):
    root, allow = env
    clip = "CIDAS/clipseg-rd64-refined"
    shutil.rmtree(root / "hub" / clip)
    rep = run_preflight(_cfg(), allow)
    assert rep.ok and any(clip in f.what and "never loaded" in f.what for f in rep.findings)
    # the earlier card has no masks: CLIPSeg masks every view, and its absence is a problem
    from nearid_lib.data.released_schema import EARLIER

    early = tmp_path_factory.mktemp("early")
    write_nearid_datasets(early, n_ids=18, layout=EARLIER)
    for r in ("Aleksandar/NearID",):
        shutil.rmtree(root / "hub" / r)
        shutil.copytree(early / r, root / "hub" / r)
    record_mirror(root / "hub")
    rep = run_preflight(_cfg(), allow)
    assert any(f"{clip} (model" in p and "is not in the mirror" in p for p in _problems(rep))
    assert any("ships no masks: CLIPSeg" in f.what for f in rep.findings)


def test_environment_and_gpus(env, monkeypatch):
    root, allow = env
    monkeypatch.delenv("NEARID_ALLOW_CPU")
    monkeypatch.delenv("NEARID_HUB_DIR")
    probs = _problems(run_preflight(_cfg(), allow))
    assert any("HF_HUB_OFFLINE=1 but NEARID_HUB_DIR is unset" in p for p in probs)
    assert any("no CUDA GPU visible" in p and "NEARID_ALLOW_CPU=1" in p for p in probs)
    # the judge's sharding plan is the judge step's own (one rule: nearid_lib.steps.placement)
    gb = 10**9
    assert [len(r) for r in plan_replicas(62 * gb, [80 * gb] * 8).replicas] == [1] * 8
    assert [len(r) for r in plan_replicas(62 * gb, [40 * gb] * 8).replicas] == [2] * 4
    assert not plan_replicas(200 * gb, [40 * gb] * 2).fits


def test_disk_projection_against_free_space(env, monkeypatch):
    import nearid_lib.preflight.machine as mach
    from nearid_lib.steps import Sizes, step

    root, allow = env
    rep = run_preflight(_cfg(), allow)
    # the token store by hand: 4 test + 2 val identities' views x (1 + 9 sources) + 12 train identities'
    # views x (1 + 4 training sources) + MTG's 4 images a pair in both of the fixture's splits (6 train,
    # 6 test pairs), both variants, (32 // 8)^2 tokens x (32 + 4) bytes (int8)
    plan = mach.disk_plan(_cfg(), rep)
    v, mtg = rep.facts["views_by_split"], rep.facts["mtg_pairs_by_split"]
    assert mtg == {"train": 6, "test": 6}
    grids = (v["train"] * 5 + (v["val"] + v["test"]) * 10 + 4 * (6 + 6)) * 2
    assert dict((w, n) for w, _, n in plan)["token store (int8)"] == grids * 16 * 36
    # one formula: the resource ledger's prefill step counts the same grids
    assert step("prefill").count(Sizes.from_facts(rep.facts, _cfg()), _cfg()) == grids
    monkeypatch.setattr(mach.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 0))
    probs = _problems(run_preflight(_cfg(), allow))
    assert any("projected on the file system" in p and "0.0 GB free" in p for p in probs)
    # the store streams past its reserve: the problem names the other outputs only
    assert not any("token store" in p for p in probs)


def _store(folder: Path, n: int) -> None:
    """A token store of the fixture's backbone grids (16 x 32, int8) in ``folder`` holding ``n`` grids."""
    import torch

    from nearid_lib.features.shards import ShardedTokenStore

    st = ShardedTokenStore(folder, 16, 32, "int8", key=folder.name, writer="w")
    st.put([(f"img/{i}.png", "full") for i in range(n)], torch.randn(n, 16, 32))


def test_only_the_runs_own_store_counts_as_written(env):
    """A store of another code version (same backbone and dtype, another key) and other cached
    outputs are used space, named with their size and the folder to delete; only the grids of the
    store this run opens are subtracted from the need."""
    import nearid_lib.preflight.machine as mach
    from nearid_lib.features.stream import store_prefix

    root, allow = env
    cfg = _cfg()
    cache = root / "cache" / "paper"
    stale = cache / "shards" / (store_prefix("siglip2-so400m-patch14-384", "int8") + "0" * 16)
    _store(stale, 40)
    (cache / "judge_answers").mkdir(parents=True)
    (cache / "judge_answers" / "rank0.jsonl").write_text("x" * 5000)
    # the release is not materialised: the store's key covers its manifest, so no store is this run's
    folder, why = mach.run_store(cfg)
    assert folder is None and "not materialised" in why
    release = root / "data" / "paper" / "nearid"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text('{"complete": true}')
    own, why = mach.run_store(cfg)
    assert own is not None and own != stale and own.parent == stale.parent and why == ""
    _store(own, 7)
    rep = run_preflight(cfg, allow)
    assert rep.ok, _problems(rep)
    full = dict((w, n) for w, _, n in mach.disk_plan(cfg, rep))["token store (int8)"]
    assert full == (rep.facts["token_store"]["grids"] - 7) * 16 * 36
    notes = [f.what for f in rep.findings if f.kind == "note" and f.area == "disk"]
    assert any(str(stale) in n and "does not open" in n and f"rm -rf {stale}" in n for n in notes)
    assert any(str(cache / "judge_answers") in n and f"rm -rf {cache / 'judge_answers'}" in n for n in notes)
    assert not any(str(own) + ":" in n for n in notes)
    assert any("7 already in " + str(own) in f.what for f in rep.findings if f.kind == "plan")


def test_a_store_larger_than_the_disk_streams_the_rest(env, monkeypatch):
    """The token store beyond the room its file system keeps is a note with the numbers (the
    store stops at its reserve and training streams the rest), not a problem."""
    import nearid_lib.preflight.machine as mach

    root, allow = env
    cfg = _cfg()
    rep = run_preflight(cfg, allow)
    need = dict((w, n) for w, _, n in mach.disk_plan(cfg, rep))
    store = need.pop("token store (int8)")
    others = sum(need.values())
    total = 10**6                                        # a reserve of 5% of it: 50 kB
    free = others + 50_000 + store / 2
    monkeypatch.setattr(mach.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(total, total - free, free))
    rep = run_preflight(cfg, allow)
    assert rep.ok, _problems(rep)
    note = next(f.what for f in rep.findings if f.kind == "note" and "streams the backbone" in f.what)
    assert note.startswith("token store (int8): ") and f"{rep.facts['token_store']['grids']:,} grids" in note
    assert "the 0.0 GB the store leaves free" in note
    left = int(-(-(store - store / 2) // (16 * 36)))
    assert f"({left:,} of " in note


def test_command_line_exit_status(env, capsys):
    from nearid_lib.cli import main

    root, allow = env
    os.environ["NEARID_SET"] = "; ".join(f"{k}={v}" for k, v in SIZE_OVERRIDES.items())
    try:
        assert main(["preflight", "--allow-missing", *allow]) == 0
        damage(root / "hub", root / "dl", ["template"])
        assert main(["preflight", "--allow-missing", *allow,
                     "--set", f"judge.prompt_file={root}/dl/NearID/evaluation/vl_template_v2.txt"]) == 1
    finally:
        del os.environ["NEARID_SET"]
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("preflight (paper): 1 problem(s)") or "problem(s)" in out[-1]
    assert any(ln.startswith("PROBLEM [judge]") for ln in out)


def test_notebook_00_reads_the_mirror(env):
    """envcheck (notebook 00) with NEARID_HUB_DIR: a model in the mirror is available there, with the
    commit its record names; one that is not says how to fetch it; every repository is listed."""
    from nearid_lib.runtime.envcheck import backbone_table, dataset_table, hub_table

    root, _ = env
    b = backbone_table().set_index("backbone")
    assert b.loc["siglip2-so400m-patch14-384", "available"]
    assert "commit dryrun-fixture" in b.loc["siglip2-so400m-patch14-384", "where"]
    assert not b.loc["bioclip2", "available"] and "--only imageomics/bioclip-2" in b.loc["bioclip2", "where"]
    assert dataset_table("paper").set_index("dataset").loc["NearID positives", "available"]
    t = hub_table().set_index("repo")
    assert list(t.index) == [r for r, _, _ in hub.PAPER_REPOS]
    assert t.loc["Aleksandar/NearID", "complete"] and t.loc["Aleksandar/NearID", "revision"] == "dryrun-fixture"
    damage(root / "hub", root / "dl", ["truncated"])
    assert not hub_table().set_index("repo").loc["Aleksandar/NearID-Flux", "complete"]
