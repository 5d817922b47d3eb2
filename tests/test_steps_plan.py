"""The resource ledger, the placement rule and the plan of a paper run: models placed on one GPU, on
a group with device_map, or refused with the numbers; items counted by the enumeration the step runs;
`nearid plan --gpus` for any machine, exit 1 naming what a machine cannot hold."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from nearid_lib import hub
from nearid_lib.cli import main as cli_main
from nearid_lib.config import get_profile
from nearid_lib.steps import Sizes, all_steps, parse_gpus, plan_run, step
from nearid_lib.steps.ledger import per_source_pairs
from nearid_lib.steps.placement import (CUDA_CONTEXT_BYTES, MODEL_PARAMS, device_kwargs, model_bytes, plan_replicas,
                                        replica_of)

GB = 10**9


# ------------------------------------------------------------------ the placement rule
def test_replicas_of_the_30b_judge_on_h100s_a100s_and_too_small_gpus():
    mb = model_bytes("Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert mb == int(31.07e9 * 2)                        # bf16 weights from the parameter count
    h100 = plan_replicas(mb, [80 * GB] * 8)              # 62 GB fits one 80 GB GPU: one replica per GPU
    assert h100.replicas == tuple((i,) for i in range(8)) and h100.idle == () and h100.gpus_per_replica == 1
    a100 = plan_replicas(mb, [40 * GB] * 8)              # needs two 40 GB GPUs: 4 replicas of 2
    assert a100.replicas == ((0, 1), (2, 3), (4, 5), (6, 7)) and a100.placement() == "4 x 2 GPUs (device_map)"
    odd = plan_replicas(mb, [40 * GB] * 3)               # the third GPU cannot hold a replica alone
    assert odd.replicas == ((0, 1),) and odd.idle == (2,) and odd.fits
    small = plan_replicas(mb, [24 * GB, 24 * GB])        # 48 GB in all: it does not fit
    assert not small.fits and small.replicas == () and "does not fit" in small.describe()
    cpu = plan_replicas(mb, [])                          # no GPU: one process on the CPU
    assert cpu.fits and cpu.replicas == () and "CPU" in cpu.describe()
    assert plan_replicas(mb, [40 * GB] * 8) == a100      # a pure function
    # the need: weights + 15% + 2 GiB of working set (the VLM default) + the CUDA context
    assert a100.need_bytes == mb + int(0.15 * mb) + 2 * 2**30 + CUDA_CONTEXT_BYTES
    with pytest.raises(ValueError):
        plan_replicas(0, [40 * GB])
    with pytest.raises(ValueError):
        plan_replicas(mb, [40 * GB, 0])


def test_a_training_step_is_never_spread_over_gpus():
    # 50 GB of need: two 40 GB GPUs would hold it spread, but a training step runs on one GPU
    spread = plan_replicas(30 * GB, [40 * GB] * 2, working_bytes=18 * GB)
    alone = plan_replicas(30 * GB, [40 * GB] * 2, working_bytes=18 * GB, splittable=False)
    assert spread.fits and spread.replicas == ((0, 1),)
    assert not alone.fits and alone.idle == (0, 1)


def test_device_kwargs_put_one_replica_on_its_gpus_only():
    plan = plan_replicas(62 * GB, [40 * GB] * 4)
    assert plan.replicas == ((0, 1), (2, 3))
    kw = device_kwargs(plan, 2)
    assert kw["device_map"] == "auto" and kw["max_memory"]["cpu"] == 0
    assert kw["max_memory"][0] == kw["max_memory"][1] == 0
    share = (plan.need_bytes - plan.model_bytes) // 2
    assert kw["max_memory"][2] == kw["max_memory"][3] == 40 * GB - share
    assert replica_of(plan, 2) == (2, 3) and replica_of(plan, 1) is None and device_kwargs(plan, 1) is None


def test_model_bytes_prefer_the_mirrors_files(tmp_path):
    folder = tmp_path / "Qwen" / "Qwen3-VL-8B-Instruct"
    folder.mkdir(parents=True)
    (folder / "model-00001.safetensors").write_bytes(b"x" * 1000)
    (folder / "model-00002.safetensors").write_bytes(b"x" * 500)
    assert model_bytes("Qwen/Qwen3-VL-8B-Instruct", mirror=tmp_path) == 1500
    assert model_bytes("Qwen/Qwen3-VL-8B-Instruct") == int(8.77e9 * 2)
    assert model_bytes("someone/unknown-vl") is None


# ------------------------------------------------------------------ machines
def test_gpu_specs_by_model_or_memory():
    a = parse_gpus("8xA100-40GB")
    assert len(a) == 8 and {g.name for g in a} == {"A100-40GB"} and not a[0].rates_of
    assert [g.name for g in parse_gpus("2xH100+1xA100")] == ["H100", "H100", "A100-80GB"]
    small = parse_gpus("1x24GB")
    assert len(small) == 1 and 23 * GB < small[0].memory_bytes < 24 * GB and small[0].rates_of == "A100-40GB"
    for bad in ("8xB300", "A100", "0xH100", "8x"):
        with pytest.raises(ValueError, match="--gpus"):
            parse_gpus(bad)
    # a memory-bound item takes bandwidth-ratio longer on an A100-40GB than on an H100
    h100, a40 = parse_gpus("1xH100")[0], a[0]
    assert a40.scale(h100, "memory") == pytest.approx(3.35 / 1.555)
    assert a40.scale(h100, "compute") == pytest.approx(989 / 312) and a40.scale(h100, "cpu") == 1.0


# ------------------------------------------------------------------ the ledger
def test_every_step_declares_models_that_the_mirror_downloads_its_resume_and_a_cost_basis():
    steps = all_steps()
    names = [s.name for s in steps]
    assert len(names) == len(set(names))
    for want in ("curate", "prefill", "train", "sweep", "judge-nearid", "judge-mtg", "judge-dbpp", "idsim-mllm",
                 "bgremove", "fpr-galleries", "fpr-embed", "fpr-gpt", "fpr-dreambooth-train"):
        assert want in names, want
    repos = {r for r, _, _ in hub.PAPER_REPOS}
    for s in steps:
        c = s.current_cost()
        assert s.resume and s.outputs and c.basis and c.status in (
            "measured", "measured by the authors", "projected"), s.name
        for m in s.models:
            assert m.repo in repos, (s.name, m.repo)          # a model the download fetches
            assert m.repo in MODEL_PARAMS, (s.name, m.repo)    # and one the plan can size without its weights
    assert (step("fpr-gpt").network and step("fpr-gpt").gpus == "none")
    with pytest.raises(KeyError, match="declared"):
        step("no-such-step")


def _tiny_release(n_ids: int, three: set[int], sources: list[str]):
    rows, dist = [], {s: [] for s in sources}
    for n in range(n_ids):
        k = 3 if n in three else 2
        rows.append({"id": n, "split": "test", **{f"img{i}": (f"p{n}_{i}.png" if i <= k else "") for i in (1, 2, 3)},
                     **{f"mask{i}": (f"m{n}_{i}.png" if i <= k else "") for i in (1, 2, 3)}})
        for s in sources:
            dist[s].append({f"nimg{i}": (f"{s}{n}_{i}.png" if i <= k else "") for i in (1, 2, 3)})
    return SimpleNamespace(positives=pd.DataFrame(rows), distractors={s: pd.DataFrame(v) for s, v in dist.items()})


def test_judge_pairs_are_counted_by_the_enumeration_the_judge_runs():
    from nearid_lib.nearid.pairs import nearid_pairs

    sources = ["Flux", "SDXL", "Qwen"]
    data = _tiny_release(5, {1, 3}, sources)
    listed = nearid_pairs(data, "test", sources)
    sizes = Sizes({"test": 5}, {"test": 2}, {"test": 4}, 0, len(sources), 1, "fixture")
    pos, dist = per_source_pairs(sizes)
    assert (pos, dist) == (len(listed["pos"]), len(listed["dist"]["Flux"])) == (3 + 2 * 3, 12)
    cfg = get_profile("paper")
    judged = step("judge-nearid").count(sizes, cfg)
    assert judged == 2 * (len(listed["pos"]) + sum(len(v) for v in listed["dist"].values()))   # full and FG-only
    assert step("judge-mtg").count(sizes, cfg) == 5 * 2 * 4
    assert step("judge-dbpp").count(replace_dbpp(sizes, 9450), cfg) == 9450       # each generation once


def replace_dbpp(sizes: Sizes, n: int) -> Sizes:
    from dataclasses import replace

    return replace(sizes, dbpp_generations=n)


def test_sizes_from_the_release_name_what_was_counted():
    cfg = get_profile("paper")
    s = Sizes.from_facts({"ids_by_split": {"train": 10, "val": 2, "test": 3},
                          "three_view_by_split": {"train": 4, "val": 0, "test": 1}}, cfg)
    assert s.views("test") == 7 and s.views("train") == 24 and s.eval_sources == 9 and s.train_sources == 4
    assert "counted from the release" in s.basis and "stated: mtg_pairs_by_split" in s.basis
    assert Sizes.from_facts({}, cfg).basis == Sizes.stated(cfg).basis
    st = Sizes.stated(cfg)
    assert st.ids == {"train": 18_786, "val": 100, "test": 500}


# ------------------------------------------------------------------ the plan
def test_plan_on_a100s_places_the_30b_judge_on_pairs_and_every_step_gets_hours():
    cfg = get_profile("paper")
    plans = {p.step.name: p for p in plan_run(parse_gpus("8xA100-80GB"), Sizes.stated(cfg), cfg)}
    assert all(p.problem is None and p.wall_h is not None and p.wall_h > 0 for p in plans.values()), \
        [p.problem for p in plans.values() if p.problem]
    a40 = {p.step.name: p for p in plan_run(parse_gpus("8xA100-40GB"), Sizes.stated(cfg), cfg)}
    assert "Qwen3-VL-30B-A3B-Instruct: 4 x 2 GPUs (device_map)" in a40["judge-nearid"].placement()
    # the 30B and the two other scales judge every pair, one after another
    assert a40["judge-nearid"].items == step("judge-nearid").count(Sizes.stated(cfg), cfg)
    assert len(a40["judge-nearid"].models) == 3
    # memory-bound judging: slower on the A100-40GB's bandwidth than on the 80 GB card's
    assert a40["judge-dbpp"].wall_h > plans["judge-dbpp"].wall_h
    # the mission's machines hold every step, DreamBooth's full fine-tune included: its text encoders
    # wait on the CPU, so the GPU holds the fp32 transformer, its gradients and AdamW moments (16 bytes
    # a parameter, 32.5 GB for 2.03B) and the VAE, not the 15 GB pipeline beside them
    assert all(p.problem is None for p in a40.values()), [p.problem for p in a40.values() if p.problem]
    db = a40["fpr-dreambooth-train"].models[0]
    assert db.weights_bytes == int(2.03e9 * 4 + 0.084e9 * 2) and "text encoders on the CPU" in db.size_basis
    assert 2.03e9 * 16 < db.plan.need_bytes < parse_gpus("1xA100-40GB")[0].memory_bytes
    assert db.plan.placement() == "8 x 1 GPU"
    # gallery embeddings run in notebook 11's kernel: one GPU, every encoder in turn, not eight
    emb = a40["fpr-embed"]
    per = emb.step.current_cost().seconds_on(parse_gpus("1xA100-40GB")[0])
    assert emb.wall_h == pytest.approx(len(emb.models) * emb.items * per / 3600, rel=1e-9)
    assert "1 GPU (a notebook's kernel)" in emb.placement()


def test_nearid_plan_exits_1_naming_the_judge_on_a_24gb_gpu(capsys):
    assert cli_main(["plan", "--gpus", "1x24GB", "--read-GBps", "3"]) == 1
    out = capsys.readouterr().out
    assert "does not fit: step judge-nearid: Qwen/Qwen3-VL-30B-A3B-Instruct needs" in out
    assert cli_main(["plan", "--gpus", "8xH100", "--read-GBps", "3"]) == 0
    out = capsys.readouterr().out
    for s in all_steps():
        assert f"\n{s.name}  (" in out, s.name
    assert "total:" in out and "does not fit" not in out
    assert cli_main(["plan", "--gpus", "8xA100-40GB"]) == 0
    assert "does not fit" not in capsys.readouterr().out
    assert cli_main(["plan", "--gpus", "8xB300"]) == 2


def test_step_records_are_checked_against_the_ledger(tmp_path, monkeypatch):
    from nearid_lib.steps.ledger import check_records, record_items, recorded_items

    monkeypatch.setenv("NEARID_OUT", str(tmp_path))
    cfg = get_profile("paper", overrides={"eval.vlm_max_ids": "2"})
    sizes = Sizes({"test": 4}, {"test": 1}, {"test": 3}, 7, 9, 4, "fixture", test_views=(2, 3, 2, 2))
    # the first two identities: (1 + 3) positive pairs, (2 + 3) x 9 distractor pairs, full and FG-only
    want = step("judge-nearid").count(sizes, cfg)
    assert want == 2 * (4 + 5 * 9)
    record_items("paper", "judge-nearid", {"Qwen/Qwen3-VL-30B-A3B-Instruct": want}, "pairs")
    record_items("paper", "judge-mtg", {"Qwen/Qwen3-VL-30B-A3B-Instruct": 5 * 2 * 2}, "pairs")
    assert set(recorded_items("paper")) == {"judge-nearid", "judge-mtg"}
    assert check_records("paper", sizes, cfg) == []
    record_items("paper", "judge-dbpp", {"Qwen/Qwen3-VL-30B-A3B-Instruct": 8}, "generations")   # 7 rated
    probs = check_records("paper", sizes, cfg)
    assert len(probs) == 1 and "judge-dbpp" in probs[0] and "processed 8 generations" in probs[0] and "counts 7" in probs[0]
    with pytest.raises(KeyError):
        record_items("paper", "no-such-step", 1, "things")


def test_the_runner_refuses_a_machine_too_small_before_loading_anything(monkeypatch, capsys):
    from nearid_lib.steps import runner

    cfg = get_profile("paper")
    probs = runner.preplace("judge", cfg, gpus=parse_gpus("1x24GB"))
    assert probs and all(p.startswith("step judge-") for p in probs) and "Qwen3-VL-30B-A3B-Instruct" in probs[0]
    assert runner.preplace("judge", cfg, gpus=parse_gpus("8xH100")) == []
    assert runner.preplace("judge", cfg, gpus=[]) == []                 # no GPU: the dry run's CPU process
    monkeypatch.setattr(runner, "visible_gpus", lambda: parse_gpus("1x24GB"))
    monkeypatch.setattr(runner, "_load_entry", lambda m: pytest.fail(f"{m} imported"))
    assert runner.main(["run", "judge", "--profile", "paper"]) == 1
    assert "cannot place: step judge-nearid" in capsys.readouterr().err
    assert runner.main(["run", "no-such-target"]) == 2
    # every make target of a GPU step is the ledger's, with its entry module, and the other way round
    import re

    from nearid_lib.paths import repo_root

    made = set(re.findall(r"^\$\(eval \$\(call gpu_step,([\w-]+),", (repo_root() / "Makefile").read_text(), re.M))
    assert set(runner.targets()) == made == {"curate", "prefill", "train-heads", "judge", "idsim-judge",
                                             "fpr-galleries", "fpr-generate", "bgremove", "fpr-gpt"}
    assert runner.targets()["judge"][0] == "nearid_lib.nearid.judge_step"


def test_the_placement_catalogue_agrees_with_the_sizes_counted_on_the_meta_device():
    import sys

    from nearid_lib.paths import repo_root

    sys.path.insert(0, str(repo_root() / "benchmarks"))
    from gpu_suite_models import PUBLISHED_PARAMS      # checked against the model classes on the meta device

    # the catalogue's counts: whole models, or the sum of a pipeline's parts the suite counts one by one
    assert MODEL_PARAMS["google/siglip2-so400m-patch14-384"][0] == pytest.approx(PUBLISHED_PARAMS["siglip2_so400m"], rel=0.01)
    assert MODEL_PARAMS["Qwen/Qwen3-VL-30B-A3B-Instruct"][0] == pytest.approx(PUBLISHED_PARAMS["qwen3vl_30b"], rel=0.01)
    flux = PUBLISHED_PARAMS["flux_transformer"] + PUBLISHED_PARAMS["t5_xxl_encoder"]
    assert flux < MODEL_PARAMS["black-forest-labs/FLUX.1-Kontext-dev"][0] < flux * 1.03      # + CLIP-L and the VAE
    sd3 = PUBLISHED_PARAMS["sd3_transformer"] + PUBLISHED_PARAMS["t5_xxl_encoder"]
    assert sd3 < MODEL_PARAMS["stabilityai/stable-diffusion-3-medium-diffusers"][0] < sd3 * 1.15   # + two CLIPs, VAE
    assert PUBLISHED_PARAMS["sdxl_unet"] < MODEL_PARAMS["stabilityai/stable-diffusion-xl-base-1.0"][0]


def test_a_kernel_that_loads_a_steps_model_fails_the_dry_run(tmp_path, monkeypatch):
    import json

    from nearid_lib import hub
    from tools.paper_fixtures import check_kernel_loads

    mirror = tmp_path / "hub"
    (mirror / "Qwen" / "Qwen3-VL-30B-A3B-Instruct").mkdir(parents=True)
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror))
    hub.clear_reads()
    # a load by mirror folder is recorded by its repo id
    hub.note_load(str(mirror / "Qwen" / "Qwen3-VL-30B-A3B-Instruct"), "VLM judge")
    hub.note_load("google/siglip2-so400m-patch14-384", "backbone")
    assert hub.loads() == ["Qwen/Qwen3-VL-30B-A3B-Instruct", "google/siglip2-so400m-patch14-384"]
    hub.clear_reads()
    assert hub.loads() == []
    tables = tmp_path / "figures" / "tables"
    tables.mkdir(parents=True)
    (tables / "04_x.meta.json").write_text(json.dumps({"notebook": "04_eval_nearid_bench", "loaded": [
        "Qwen/Qwen3-VL-30B-A3B-Instruct", "google/siglip2-so400m-patch14-384"]}))
    (tables / "11_x.meta.json").write_text(json.dumps({"notebook": "11_retrieval_galleries", "loaded": ["Carve/fba"]}))
    (tables / "03_x.meta.json").write_text(json.dumps({"notebook": "03_train_nearid"}))
    probs = check_kernel_loads(tmp_path / "figures")
    # the judge (a step's model) is a problem; the backbone of the head trainings (run in notebooks) is not
    assert len(probs) == 2 and "04_eval_nearid_bench loaded Qwen/Qwen3-VL-30B-A3B-Instruct" in probs[0]
    assert "step judge-" in probs[0] or "step idsim-mllm" in probs[0]
    assert "11_retrieval_galleries loaded Carve/fba, a model of step bgremove" in probs[1]
