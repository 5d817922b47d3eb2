"""The report renders tables from files: paper values beside ours, nothing typed in."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from nearid_lib import report


def _spec_files(tmp_path):
    pv = tmp_path / "pv"
    pv.mkdir()
    pd.DataFrame({"row": ["frozen", "ours"], "ssr": [30.74, 99.17], "pa": [48.81, 99.71]}).to_csv(
        pv / "t1.csv", index=False)
    (pv / "t1.meta.json").write_text(json.dumps({
        "key": "t1", "paper": "NearID", "table": "Table 1", "title": "main",
        "key_columns": ["row"], "metrics": {"ssr": "SSR %", "pa": "PA %"},
        "ours": "tables/04_t1.csv"}))
    return pv


def test_side_by_side_joins_and_keeps_paper_order():
    paper = pd.DataFrame({"row": ["b", "a"], "m": [1.0, 2.0]})
    ours = pd.DataFrame({"row": ["a", "c"], "m": [20.0, 30.0], "other": [0, 0]})
    t = report.side_by_side(paper, ours, ["row"], ["m"])
    assert list(t["row"]) == ["b", "a", "c"]
    assert list(t.columns) == ["row", "m (paper)", "m (ours)"]
    assert t.loc[1, "m (ours)"] == 20.0 and math.isnan(t.loc[0, "m (ours)"])
    assert math.isnan(t.loc[2, "m (paper)"]) and t.loc[2, "m (ours)"] == 30.0


def test_side_by_side_errors_name_missing_key():
    with pytest.raises(KeyError, match="row"):
        report.side_by_side(pd.DataFrame({"row": ["a"], "m": [1]}), pd.DataFrame({"x": [1]}), ["row"], ["m"])


def test_render_report_reads_ours_and_claims(tmp_path):
    pv = _spec_files(tmp_path)
    figs = tmp_path / "figs"
    (figs / "tables").mkdir(parents=True)
    pd.DataFrame({"row": ["frozen", "ours"], "ssr": [1.5, 97.25], "pa": [12.0, 99.0],
                  "profile": ["mini", "mini"]}).to_csv(figs / "tables" / "04_t1.csv", index=False)
    pd.DataFrame({"claim": ["c1"], "paper": ["30.7"], "ours": ["1.5"], "holds": [True],
                  "detail": ["d"], "profile": ["mini"]}).to_csv(figs / "tables" / "claims_04.csv", index=False)
    text = report.render_report(figs, report.load_specs(pv))
    assert "| frozen | 30.74 | 1.50 | 48.81 | 12.00 |" in text
    assert "| ours | 99.17 | 97.25 | 99.71 | 99.00 |" in text
    assert "profile: mini" in text and "## Claims checked" in text and "| c1 |" in text


def test_render_report_marks_missing_ours(tmp_path):
    pv = _spec_files(tmp_path)
    text = report.render_report(tmp_path / "nofigs", report.load_specs(pv))
    assert "not produced in this run" in text and "30.74" in text


def test_meta_missing_field_is_an_error(tmp_path):
    (tmp_path / "bad.meta.json").write_text(json.dumps({"key": "bad"}))
    with pytest.raises(ValueError, match="bad.meta.json"):
        report.load_specs(tmp_path)


def test_ours_label_is_shown_not_joined():
    paper = pd.DataFrame({"row": ["SigLIP2"], "m": [30.0]})
    ours = pd.DataFrame({"row": ["SigLIP2"], "ours_label": ["EffNet-Lite0 GAP (frozen)"], "m": [2.0]})
    t = report.side_by_side(paper, ours, ["row"], ["m"])
    assert list(t.columns) == ["row", "ours_label", "m (paper)", "m (ours)"]
    assert t.loc[0, "ours_label"] == "EffNet-Lite0 GAP (frozen)" and t.loc[0, "m (ours)"] == 2.0


def test_unjoinable_tables_are_shown_separately(tmp_path):
    pv = _spec_files(tmp_path)
    figs = tmp_path / "figs"
    (figs / "tables").mkdir(parents=True)
    # long-form table of ours: no shared key value with the paper -> shown as its own table
    pd.DataFrame({"row": ["mini-world"], "encoder": ["gap"], "map": [0.4], "profile": ["mini"]}).to_csv(
        figs / "tables" / "04_t1.csv", index=False)
    text = report.render_report(figs, report.load_specs(pv))
    assert "Paper:" in text and "Ours:" in text and "| mini-world | gap | 0.400 |" in text


def test_descriptive_tables_are_listed_not_rendered(tmp_path):
    pv = _spec_files(tmp_path)
    pd.DataFrame({"param": ["lr"], "value": [1e-4]}).to_csv(pv / "hp.csv", index=False)
    (pv / "hp.meta.json").write_text(json.dumps({
        "key": "hp", "paper": "NearID", "table": "Table 9", "title": "hyper-parameters",
        "key_columns": ["param"], "metrics": {"value": "v"}, "ours": None}))
    text = report.render_report(tmp_path / "nofigs", report.load_specs(pv))
    assert "## Paper tables without a counterpart here" in text
    assert "NearID Table 9: hyper-parameters (`paper_values/hp.csv`)" in text
    assert text.index("Table 1") < text.index("Paper tables without")


def test_provenance_summary_reads_the_sidecars(tmp_path):
    import json
    from nearid_lib.report import provenance_summary
    t = tmp_path / "tables"
    t.mkdir()
    for name, commit, dirty, seeds, date in (("a", "abcdef1234567", False, [0, 1, 2], "2026-11-23T10:00:00+00:00"),
                                             ("b", "1234567890ab", True, None, "2026-11-23T11:30:00+00:00")):
        (t / f"{name}.csv").write_text("x\n1\n")
        meta = {"table": f"{name}.csv", "profile": "mini", "seed": 0, "commit": commit, "dirty": dirty, "date": date}
        if seeds:
            meta["seeds"] = seeds
        (t / f"{name}.meta.json").write_text(json.dumps(meta))
    s = provenance_summary(t)
    assert "2 tables" in s and "profile mini" in s
    assert "abcdef1234" in s and "1234567890+dirty" in s
    assert "seeds 0, 1, 2" in s and "2026-11-23 10:00 to 2026-11-23 11:30" in s
    assert provenance_summary(tmp_path / "none") == ""


def test_partial_tables_say_which_rows_are_missing(tmp_path):
    pv = _spec_files(tmp_path)
    meta = json.loads((pv / "t1.meta.json").read_text())
    (pv / "t1.meta.json").write_text(json.dumps({**meta, "partial": "the MLLM rows need hosted APIs."}))
    figs = tmp_path / "figs"
    (figs / "tables").mkdir(parents=True)
    pd.DataFrame({"row": ["ours"], "ssr": [97.25], "pa": [99.0]}).to_csv(figs / "tables" / "04_t1.csv", index=False)
    text = report.render_report(figs, report.load_specs(pv))
    assert "_Rows not produced: the MLLM rows need hosted APIs._" in text
    # without ours the table is not produced at all: the partial note is not shown
    assert "Rows not produced" not in report.render_report(tmp_path / "nofigs", report.load_specs(pv))


def test_seeds_line_names_the_claims_with_fewer_seeds():
    frame = pd.DataFrame({"seeds": ["3/1", "3/3", "1/1", "1", None],
                          "source": ["tables/claims_04.csv", "tables/claims_05.csv", "tables/claims_09.csv",
                                     "tables/claims_11.csv", "tables/claims_11.csv"]})
    line = report.seeds_line(frame)
    assert line.startswith("Training seeds behind the claims (column `seeds`, per side): up to 3.")
    assert "`tables/claims_09.csv` (1), `tables/claims_11.csv` (1)" in line and "claims_05" not in line
    assert report.seeds_line(frame.drop(columns="seeds")) == ""
    assert "Fewer" not in report.seeds_line(frame.iloc[:2])


def test_point_valued_claims_are_listed_apart(tmp_path):
    (tmp_path / "tables").mkdir()
    pd.DataFrame({"claim": ["interval claim", "point claim", "untestable"], "paper": ["p"] * 3, "ours": ["o"] * 3,
                  "verdict": ["holds", "does not hold", "not testable"], "ci_low": [0.1, None, None],
                  "profile": ["mini"] * 3}).to_csv(tmp_path / "tables" / "claims_x.csv", index=False)
    text = report.render_report(tmp_path, specs=[])
    main, _, point = text.partition("### Point comparisons")
    assert "| interval claim |" in main and "| untestable |" in main and "| point claim |" not in main
    assert "1 claim(s) are judged on point values" in point and "| point claim |" in point
    assert report.point_claims(pd.DataFrame({"verdict": ["holds"]})).tolist() == [False]


def test_summary_counts_only_tests_of_the_papers_claims(tmp_path):
    """Every reason a claim is not counted is a rule applied to its data (claims.exclusions): a
    calibration target of the world, a truth by construction, a criterion declared after the claim's
    first result, an untestable claim, a metric at the random-init floor, a point comparison; the
    project's own questions are apart."""
    from nearid_lib.claims.exclusions import RuleContext
    from nearid_lib.claims.history import COLUMNS
    from nearid_lib.claims.report_section import outcomes_of
    from nearid_lib.report import summary_lines

    (tmp_path / "04_chance.csv").write_text("benchmark,group,metric,frozen,random_init,margin,random_reaches_frozen\n"
                                            "NearID Table 1,,mtg_mo,0.15,0.22,-0.07,True\n")
    late = "nearid.full.structure.ssr - nearid.full.train.ssr > -5.0%"       # declared at c2, first result c1
    history = pd.DataFrame([dict(zip(COLUMNS, ("k.late", "v1", late, "", "c2", "", "c2", "mini", "c1", "", "False",
                                               "True")))])
    ctx = RuleContext(tables=tmp_path, history=history)
    base = {"profile": "mini", "criterion": "a.x - b.x > 0.000", "ci_low": 0.1}
    frame = pd.DataFrame([
        {**base, "verdict": "holds", "criterion": "frozen.full.main.ssr <= 50.0%"},            # calibrated
        {**base, "verdict": "holds", "criterion": "nearid.mtg.mo - frozen.mtg.mo > 0.000"},   # chance floor
        {**base, "verdict": "holds", "ci_low": None},                                          # point comparison
        {**base, "verdict": "holds", "criterion": "specialised.copy_paste.map >= 0.900"},     # by construction
        {**base, "verdict": "holds", "key": "k.late", "criterion": late},    # post hoc, by construction (edges)
        {**base, "verdict": "not testable", "ci_low": None},
        {**base, "verdict": "holds", "own_question": "not in Fig. 6"},
        {**base, "verdict": "holds", "ci_low": 0.2},
        {**base, "verdict": "does not hold", "ci_low": 0.0},
        {**base, "verdict": "inconclusive", "ci_low": 0.0},
    ])
    outcomes = outcomes_of(frame, ctx)
    line = summary_lines(frame, outcomes=outcomes)[0]
    assert line.startswith("Summary over the 3 tests of the papers' claims: 1 holds, 1 does not hold, "
                           "1 inconclusive.")
    assert "Not counted as tests: 6 claim(s)" in line
    assert ("1 calibrated, not tested (the world was tuned to every quantity of the criterion); 2 true by "
            "construction in this profile; 1 post hoc (the criterion was declared after the claim's first committed "
            "result); 1 not testable in this profile; 1 on a metric a random-init network reaches or where the "
            "frozen encoder sits at the random-init floor; 1 a point comparison") in line
    assert "Our own questions, not the papers' claims: 1" in line
    assert report.not_counted(frame, outcomes).tolist()[3:6] == ["by construction", "by construction; post hoc",
                                                                 "not testable"]


def _row(verdict, low, high, criterion="a - b > 0.000", seeds="3/3", est=None):
    return {"verdict": verdict, "ci_low": low, "ci_high": high, "estimate": (low + high) / 2 if est is None else est,
            "criterion": criterion, "seeds": seeds}


@pytest.mark.parametrize("row, expected", [
    (_row("holds", 0.010, 0.170), "leaning holds"),                 # 8b-like: lower end 0.01 above 0
    (_row("holds", 0.200, 0.300), ""),                              # far from the criterion: firm
    (_row("does not hold", 0.789, 0.899, "q >= 95.0%", "3"), "leaning does not hold"),
    (_row("does not hold", 0.500, 0.550, "q >= 95.0%", "3"), ""),
    (_row("inconclusive", -0.076, 0.006), "leaning does not hold"),  # 6d-like: the upper end just above 0
    (_row("inconclusive", -0.006, 0.076), "leaning holds"),
    (_row("inconclusive", 0.028, 0.125, "|a - b| <= 5.0%"), "leaning does not hold"),   # 2d
    (_row("holds", 0.010, 0.170, seeds="1/1"), ""),                 # frozen encoders: the twins did not move them
    (_row("holds", 0.010, 0.170, seeds=None), ""),
    (_row("not testable", 0.010, 0.170), ""),
    (_row("holds", float("nan"), float("nan")), ""),
])
def test_leaning_verdicts_are_those_a_float_rounding_move_would_change(row, expected):
    assert report.leaning(row) == expected


def test_leaning_uses_the_margin_it_is_given_and_says_which_end():
    row = _row("holds", 0.010, 0.170)
    assert report.leaning(row, share=0.05) == ""                   # 0.05 x 0.16 = 0.008 < 0.010
    assert report.leaning(row, share=0.07) == "leaning holds"      # 0.0112 > 0.010
    assert report.leaning_detail(row, share=0.07) == ("lower end 0.010 is 0.010 from the criterion 0.000; margin "
                                                      "0.011 (0.07 x the width 0.160)")
    two_sided = _row("inconclusive", 0.028, 0.125, "|a - b| <= 5.0%")
    assert report.leaning_detail(two_sided).startswith("lower end 2.8% is 2.2% from the criterion 5.0%; margin 5.7%")
    assert report.leaning_detail(_row("holds", 0.2, 0.3)) == ""


def test_the_float_rounding_margin_is_the_one_the_twins_measured():
    """FLOAT_ROUNDING_MARGIN is what benchmarks/float_rounding_margin.py derives from the recorded
    twins (the largest move of an interval end as a share of the width, rounded up), and that share
    is a share of the width of the run read: a hand case."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "float_rounding_margin.py"
    spec = importlib.util.spec_from_file_location("float_rounding_margin", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.margin(mod.end_moves(mod.twin_pairs())) == report.FLOAT_ROUNDING_MARGIN
    hand = pd.DataFrame([{"twin": "t", "claim": "c", "seed_term": "paired", "low_a": 0.0, "high_a": 1.0,
                          "low_b": 0.1, "high_b": 0.6}])
    moves = mod.end_moves(hand)
    assert sorted(moves.share_of_width.round(6)) == [0.1, 0.2, 0.4, 0.8]   # 0.1 and 0.4 over widths 1.0 and 0.5
    assert mod.margin(moves) == 0.8


def test_claims_section_puts_own_questions_and_uncounted_claims_apart(tmp_path):
    (tmp_path / "tables").mkdir()
    pd.DataFrame([
        {"key": "k.1", "claim": "tested claim", "verdict": "holds", "ci_low": 0.01, "ci_high": 0.17,
         "estimate": 0.09, "criterion": "a - b > 0.000", "seeds": "3/3", "profile": "mini"},
        {"key": "k.2", "claim": "made claim", "verdict": "holds", "ci_low": 0.9, "ci_high": 1.0, "estimate": 0.95,
         "criterion": "specialised.copy_paste.map >= 0.900", "seeds": "3", "profile": "mini"},
        {"key": "k.3", "claim": "our claim", "verdict": "holds", "ci_low": 0.3, "ci_high": 0.4, "estimate": 0.35,
         "criterion": "a - b > 0.000", "seeds": "3/1", "profile": "mini", "own_question": "not in Fig. 6"},
    ]).to_csv(tmp_path / "tables" / "claims_x.csv", index=False)
    text = report.render_report(tmp_path, specs=[])
    tests, _, rest = text.partition("### Not counted as tests")
    uncounted, _, own = rest.partition("### Our own questions")
    assert "| tested claim |" in tests and "holds (**leaning holds**)" in tests and "| made claim |" not in tests
    assert "| made claim |" in uncounted and "| by construction |" in uncounted and "| our claim |" not in uncounted
    assert "by construction: yes (copy-paste pastes the reference's own object pixels" in uncounted
    assert "| our claim |" in own and "not in Fig. 6" in own
    assert ("Summary over the 1 tests of the papers' claims: 1 holds (1 leaning holds), 0 does not hold, "
            "0 inconclusive.") in text
    assert "**How firm a verdict is.**" in text and "Leaning in this run: k.1 (leaning holds), k.2 (leaning holds)." in text


def test_the_stand_in_column_stands_beside_the_papers_metric():
    """Where our table has ``<metric>_procedural`` (the M-H of the procedural DreamBench++ stand-in
    the claims use), it is shown beside the paper's metric, labelled, with its seed spread; it replaces
    an (ours) column no row fills, and Table 10's delta follows the same rule (issue 53, item 6)."""
    paper = pd.DataFrame({"row": ["frozen", "ours"], "dbpp_mh": [0.516, 0.545], "delta_mh": [None, -0.010]})
    ours = pd.DataFrame({"row": ["frozen", "ours"], "dbpp_mh": [None, None], "dbpp_mh_procedural": [0.647, 0.811],
                         "dbpp_mh_procedural_sd": [None, 0.011], "delta_mh": [None, None],
                         "delta_mh_procedural": [None, 0.020]})
    t = report.side_by_side(paper, ours, ["row"], ["dbpp_mh", "delta_mh"])
    assert list(t.columns) == ["row", "dbpp_mh (paper)", "dbpp_mh (ours, stand-in)", "delta_mh (paper)",
                               "delta_mh (ours, stand-in)"]
    assert t["dbpp_mh (ours, stand-in)"].tolist() == [0.647, "0.811 ± 0.011"]
    assert t.loc[1, "delta_mh (ours, stand-in)"] == 0.020
    both = report.side_by_side(paper, ours.assign(dbpp_mh=[0.5, 0.6]), ["row"], ["dbpp_mh"])
    assert list(both.columns) == ["row", "dbpp_mh (paper)", "dbpp_mh (ours)", "dbpp_mh (ours, stand-in)"]
    plain = report.side_by_side(paper, ours.drop(columns=["dbpp_mh_procedural", "delta_mh_procedural"]), ["row"],
                                ["dbpp_mh"])
    assert list(plain.columns) == ["row", "dbpp_mh (paper)", "dbpp_mh (ours)"]


def test_failing_claims_link_to_the_paragraph_that_explains_them(tmp_path):
    from nearid_lib.report import why_links

    (tmp_path / "mini.md").write_text('<a id="claim-nearid.2b"></a> **2b: the head\'s level.**\n')
    frame = pd.DataFrame([
        {"key": "nearid.2b", "profile": "mini", "verdict": "does not hold"},
        {"key": "nearid.2b", "profile": "mini", "verdict": "holds"},           # holds: nothing to explain
        {"key": "nearid.2c", "profile": "mini", "verdict": "inconclusive"},    # no paragraph: no link
        {"key": "nearid.2b", "profile": "smoke", "verdict": "does not hold"},  # no docs/smoke.md
    ])
    assert why_links(frame, tmp_path).tolist() == ["[why](../docs/mini.md#claim-nearid.2b)", "", "", ""]


def test_fpr_sources_section_says_which_methods_were_generated(tmp_path):
    (tmp_path / "tables").mkdir()
    pd.DataFrame({"method": ["Emu2", "Emu2", "DreamBooth"], "dataset": ["cow", "zebra", "cow"],
                  "source": ["user folder (Emu2/)"] * 2 + ["generated here (StableDiffusion3Pipeline)"],
                  "subjects": [10, 10, 10], "images": [100, 100, 100]}).to_csv(
        tmp_path / "tables" / "11_fpr_method_sources.csv", index=False)
    text = report.render_report(tmp_path, specs=[])
    assert "## FPR: where each method's images come from" in text
    assert "| Emu2 | user folder (Emu2/) | cow, zebra | 20 | 200 |" in text
    assert "| DreamBooth | generated here (StableDiffusion3Pipeline) | cow | 10 | 100 |" in text
    assert "where each method" not in report.render_report(tmp_path / "none", specs=[])


def test_placement_section_shows_the_candidates_and_the_choice(tmp_path):
    (tmp_path / "tables").mkdir()
    pd.DataFrame({"lora_placement": ["LoRA on the last 1 stage + conv_head", "LoRA on the last 2 stages + conv_head"],
                  "adapt_stages": [1, 2], "identity_val_roc_auc": [0.71, 0.73], "real_instance_val_acc": [0.9, 0.92],
                  "n_seeds": [1, 1], "chosen": [False, True], "rule": ["highest ROC AUC; ties: fewer stages"] * 2}).to_csv(
        tmp_path / "tables" / "09_idsim_lora_placement.csv", index=False)
    text = report.render_report(tmp_path, specs=[])
    assert "## ID-Sim: the LoRA placement, chosen on val" in text and "rule: highest ROC AUC; ties: fewer stages" in text
    assert "| LoRA on the last 2 stages + conv_head | 0.730 | 0.920 | 1 | True |" in text
    assert "LoRA placement" not in report.render_report(tmp_path / "none", specs=[])


def test_a_calibrated_table_says_so_beside_the_paper(tmp_path):
    """A table whose rows a world knob was tuned to hit (paper_values meta "calibrated", per profile)
    carries the target under its heading in that profile's report, and not in another's."""
    import json

    import pandas as pd

    from nearid_lib.paper_specs import load_specs
    from nearid_lib.report import render_report

    spec = next(s for s in load_specs() if s.key == "nearid_table1_main")
    assert "30.7 +- 5" in dict(spec.calibrated)["mini"]
    for profile in ("mini", "smoke"):
        figs = tmp_path / profile
        (figs / "tables").mkdir(parents=True)
        pd.DataFrame({"row": ["SigLIP2"], "nearid_ssr": [31.2], "profile": [profile]}).to_csv(
            figs / "tables" / "04_table1_main.csv", index=False)
        (figs / "tables" / "04_table1_main.meta.json").write_text(json.dumps({"profile": profile}))
        text = render_report(figs, specs=[spec])
        assert ("Calibrated, not reproduced:" in text) == (profile == "mini"), profile


def test_a_figure_carries_its_caption_and_the_report_prints_it(tmp_path):
    """Run.figure stores the figure's titles as its PNG ``Comment`` (the caption) beside notebook,
    profile, seed and commit; the report prints them under the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nearid_lib.plots import save
    from nearid_lib.report import png_caption, render_report
    from nearid_lib.run import figure_caption

    fig, ax = plt.subplots(1, 2)
    ax[0].set_title("SSR per source")
    ax[1].set_title("PA\nper source")
    assert figure_caption(fig) == "SSR per source; PA per source"
    fig.suptitle("NearID-bench")
    assert figure_caption(fig) == "NearID-bench"
    (tmp_path / "tables").mkdir()
    save(fig, tmp_path / "04_x.png", metadata={"Title": "04_x", "Description": "notebook 04, profile mini, seed 0",
                                               "Source": "nearid_lib at abc1234", "Comment": figure_caption(fig)})
    plt.close(fig)
    line = "*NearID-bench* (notebook 04, profile mini, seed 0; nearid_lib at abc1234)"
    assert png_caption(tmp_path / "04_x.png") == line
    assert line in render_report(tmp_path, specs=[])
