"""The report card a reader understands (issue 25, item 4): the scored encoder's own name in every
table and figure (never the internal key "yours"), the frozen EfficientNet-Lite0 rows never labelled
as SigLIP2, zero values visible in the bars, and one colour per participant across figures."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from nearid_lib import score_encoder
from nearid_lib.score.card import _figures, _nearid_bars, participant_colours

matplotlib.use("Agg")


def colour_hist(images):
    return np.stack([np.concatenate([np.histogram(np.asarray(im)[..., c], bins=8, range=(0, 256))[0]
                                     for c in range(3)]) + 1.0 for im in images])


@pytest.fixture(scope="module")
def rep(smoke_world, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("card")
    for var in ("NEARID_CACHE", "NEARID_OUT", "NEARID_FIGURES"):
        mp.setenv(var, str(tmp / var.lower()))
    mp.delenv("NEARID_SET", raising=False)
    try:
        yield score_encoder(colour_hist, profile="smoke", data=smoke_world, name="colour histogram", progress=False)
    finally:
        mp.undo()


def _texts(fig) -> list[str]:
    out = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    for ax in fig.axes:
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        leg = ax.get_legend()
        if leg is not None:
            out += [t.get_text() for t in leg.get_texts()]
    return out


def test_own_name_everywhere_and_no_lite0_row_called_siglip2(rep):
    per_source = pd.read_csv(rep.files["nearid_per_source"], keep_default_na=False)
    fpr = pd.read_csv(rep.files["fpr_methods"])
    idsim = pd.read_csv(rep.files["idsim_sensitivity"])
    labels = set(rep.table.row[rep.table.kind != "paper"])
    for t in (per_source, fpr, idsim):
        assert "yours" not in set(t.encoder) and set(t.encoder) <= labels and "colour histogram" in set(t.encoder)
        assert set(t[t.encoder == "colour histogram"].kind) == {"yours"}
    assert "method" not in per_source.columns and "ours_label" not in per_source.columns
    frozen = per_source[per_source.kind == "frozen"]
    assert len(frozen) and (frozen.paper_row == "SigLIP2 (stand-in)").all()      # efficientnet-lite0 (smoke)
    assert (per_source[per_source.kind == "yours"].paper_row == "").all()
    figs = _figures(rep)
    for name, fig in figs.items():
        texts = " ".join(_texts(fig))
        assert "yours" not in texts, name
    assert any("colour histogram" in t for t in _texts(figs["score_fpr"]))


def test_one_colour_per_participant_across_figures(rep):
    figs = _figures(rep)
    t = rep.table[rep.table.kind != "paper"]
    colour = participant_colours(rep.table)
    want = [colour[r] for r in t.row]
    assert len(set(want)) == len(want)                          # distinct participants, distinct colours
    # NearID bars: the first len(t) bars of each panel are this run's rows, in table order
    for ax in figs["score_nearid"].axes:
        bars = [to_hex(p.get_facecolor()) for p in ax.patches][:len(t)]
        assert bars == [to_hex(c) for c in want]
    # sensitivity bars (the library colours them by position): recoloured to the same colours
    for ax in figs["score_idsim"].axes:
        if ax.patches:
            names = [x.get_text() for x in ax.get_xticklabels()]
            assert sorted(names) == sorted(t.row)
            assert [to_hex(p.get_facecolor()) for p in ax.patches] == [to_hex(colour[n]) for n in names]
    # per-anchor boxes: the legend names each participant in its colour
    leg = figs["score_idsim_anchors"].axes[0].get_legend()
    got = {tx.get_text(): to_hex(h.get_facecolor()) for tx, h in zip(leg.get_texts(), leg.legend_handles)}
    assert got == {r: to_hex(colour[r]) for r in t.row}


def test_colours_stay_distinct_when_names_share_a_family():
    """A user encoder named like a baseline family ("frozen ...", "NearID ...") still gets its own colour."""
    t = pd.DataFrame({"row": ["my frozen nearid variant", "EfficientNet-Lite0 (frozen)", "NearID head", "x (paper)"],
                      "kind": ["yours", "frozen", "nearid", "paper"]})
    c = participant_colours(t)
    assert set(c) == {"my frozen nearid variant", "EfficientNet-Lite0 (frozen)", "NearID head"}
    assert len(set(c.values())) == 3 and c["my frozen nearid variant"] == "#D55E00"


def test_zero_values_are_visible(rep):
    t = pd.DataFrame({"row": ["frozen encoder", "head", "paper row"], "kind": ["frozen", "nearid", "paper"],
                      "nearid_ssr": [0.0, 42.0, 30.7]})
    fig = _nearid_bars(t, {"nearid_ssr": "SSR"}, "smoke")
    ax = fig.axes[0]
    ticks = [ln for ln in ax.get_lines() if ln.get_marker() == "|"]
    assert len(ticks) == 1 and ticks[0].get_xdata()[0] == 0 and ticks[0].get_ydata()[0] == 2   # top row
    assert {"0.0", "42.0", "30.7"} <= {x.get_text() for x in ax.texts}


def test_short_table_on_top_with_chance_and_frozen_reference(rep):
    from nearid_lib.score.headline import _p_all_pairs_win, chance_levels

    assert _p_all_pairs_win(2) == pytest.approx(1 / 3) and _p_all_pairs_win(3) == pytest.approx(1 / 15)
    head = pd.read_csv(rep.files["headline"])
    assert list(head.columns[:3]) == ["metric", "better", "colour histogram (yours)"]
    assert any(c.startswith("reference: ") and "(frozen)" in c for c in head.columns)
    assert {"chance", "chance basis"} <= set(head.columns) and head["chance"].notna().all()
    ch = chance_levels(rep.data)
    pa = head[head.metric.str.startswith("NearID PA %, full")]
    assert float(pa["chance"].iloc[0]) == 50.0
    # SSR chance: 1/3 per 2-view identity, 1/15 per 3-view one, over the test split
    nv = (rep.data.positives.query("split == 'test'")[["img1", "img2", "img3"]] != "").sum(axis=1)
    assert ch["nearid_ssr"][0] == pytest.approx(100 * np.mean([1 / 3 if k == 2 else 1 / 15 for k in nv]))
    assert 0 < ch["fpr_map"][0] < 1
    card = rep.files["card"].read_text()
    assert card.index("## At a glance") < card.index("## All scores")      # the short table comes first


# ------------------------------------------------------------------ notes that say how to read a number (issue 57)
def _table(**yours):
    paper = {"row": "NearID (Ours) (NearID paper)", "kind": "paper", "nearid_ssr": 99.17, "nearid_pa": 99.71,
             "nearid_fg_ssr": 95.3, "mtg_mo": 0.465}
    return pd.DataFrame([{"row": "mine", "kind": "yours", **yours}, paper,
                         {"row": "specialised: MiewID / BioCLIP 2 / SP-Cars (FPR paper)", "kind": "paper",
                          "fpr_map": 0.828}])


def test_notes_below_chance_and_near_the_papers_method(smoke_world):
    from types import SimpleNamespace

    from nearid_lib.score.headline import HEADLINE, chance_levels, headline_notes, headline_table

    ch = chance_levels(smoke_world)
    # the colour histogram: SSR / PA 0 (below chance 24 / 50), M-O 0.443 beside NearID's 0.465
    rep = SimpleNamespace(table=_table(nearid_ssr=0.0, nearid_pa=0.0, mtg_mo=0.443, idsim_identity=0.02,
                                       fpr_map=ch["fpr_map"][0] + 0.01), data=smoke_world, profile="mini")
    notes = headline_notes(rep)
    assert [n.split(":")[0] for n in notes] == ["NearID SSR %, full image (Table 1)", "NearID PA %, full image (Table 1)",
                                                "MTG M-O, Pearson r with the part-edit oracle"]
    assert f"0 is below chance ({ch['nearid_ssr'][0]:.3g})" in notes[0] and "matched context" in notes[0]
    assert "is near the paper's method (NearID (Ours) (NearID paper): 0.465" in notes[2]
    assert "colour histograms" in notes[2]
    head = headline_table(rep).set_index("metric")
    assert head.loc["NearID SSR %, full image (Table 1)", "note"] == "below chance"
    assert head.loc["MTG M-O, Pearson r with the part-edit oracle", "note"] == "near or above the paper's method"
    assert head.loc["ID-Sim sensitivity to identity (-slope)", "note"] == ""
    # the rule's edges: 90% of the paper's value is noted, below it is not; at chance is not below it
    edge = SimpleNamespace(table=_table(mtg_mo=0.9 * 0.465, idsim_identity=0.0, fpr_rho_map=-0.2, fpr_map=0.9),
                           data=smoke_world, profile="mini")
    got = {what: n for n in headline_notes(edge) for _, what, _ in HEADLINE if n.startswith(what + ":")}
    assert set(got) == {"MTG M-O, Pearson r with the part-edit oracle", "FPR: mAP's agreement with true drift (rho)",
                        "FPR gallery mAP of the real references"}
    assert "above the paper's method (specialised" in got["FPR gallery mAP of the real references"]
    assert "wrong way round" in got["FPR: mAP's agreement with true drift (rho)"]
    low = SimpleNamespace(table=_table(mtg_mo=0.89 * 0.465), data=smoke_world, profile="mini")
    assert headline_notes(low) == []


def test_the_card_prints_its_notes_and_its_figures_say_which_way_is_better(rep):
    from nearid_lib.score.headline import chance_levels, headline_notes

    card = rep.files["card"].read_text()
    notes = headline_notes(rep)
    assert notes, "a colour histogram on smoke: some metric is below chance"
    assert "### What the noted numbers mean" in card and all(n in card for n in notes)
    head = pd.read_csv(rep.files["headline"], keep_default_na=False)
    assert "note" in head.columns and (head.note != "").sum() >= 1
    figs = _figures(rep)
    ch = chance_levels(rep.data)
    for ax in figs["score_nearid"].axes:
        assert ax.get_title().endswith("higher is better")
        dashed = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        col = {"SSR": "nearid_ssr", "PA": "nearid_pa", "SSR (fg only)": "nearid_fg_ssr",
               "PA (fg only)": "nearid_pa"}[ax.get_title().split(":")[0]]
        assert dashed == [pytest.approx(ch[col][0])]
    titles = [ax.get_title() for ax in figs["score_idsim"].axes]
    assert any("higher is better" in t for t in titles) and any("lower is better" in t for t in titles)
