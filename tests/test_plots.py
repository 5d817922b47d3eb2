"""Every figure type of nearid_lib.plots renders to a non-trivial PNG (headless)."""
from __future__ import annotations

import matplotlib

matplotlib.use("agg")

import numpy as np
import pandas as pd
from PIL import Image

from nearid_lib import plots


def _png_ok(p):
    assert p.exists() and p.stat().st_size > 2000
    im = Image.open(p)
    assert im.format == "PNG" and min(im.size) > 100


def test_palette_and_colors():
    assert len(set(plots.OKABE_ITO)) == 8
    assert plots.method_color("NearID (Ours)") == plots.method_color("nearid")
    assert plots.method_color("frozen GAP") != plots.method_color("NearID (Ours)")
    assert plots.method_color("some new method") in plots.OKABE_ITO


def test_all_figures_write_png(tmp_path):
    plots.apply_style()
    rng = np.random.default_rng(0)
    ident = np.repeat(np.arange(4), 4)
    is_dist = np.tile([False, False, True, True], 4)
    emb = rng.normal(size=(16, 8)) + 3 * np.eye(8)[ident]
    fig = plots.kernel_pca_panels({"frozen": (emb, ident, is_dist), "NearID": (emb * 2, ident, is_dist)}, title="KPCA")
    _png_ok(plots.savefig(fig, tmp_path / "kpca.png"))

    imgs = [Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)) for _ in range(3)]
    fig = plots.attention_overlay_grid(imgs, {"NearID": [rng.random((7, 7)) for _ in range(3)],
                                              "frozen": [rng.random((7, 7)) for _ in range(3)]},
                                       ["anchor", "positive", "distractor"], title="attention")
    _png_ok(plots.savefig(fig, tmp_path / "attn.png"))

    fig = plots.ecdf_plot({"Oracle": rng.random(50), "frozen": rng.random(50) * 0.2 + 0.8,
                           "NearID": np.r_[rng.random(49), np.nan]}, panels=[["frozen"], ["NearID"]],
                          panel_titles=["(a)", "(b)"], title="ECDF")
    _png_ok(plots.savefig(fig, tmp_path / "ecdf.png"))

    mask = np.zeros((64, 64), bool)
    mask[20:40, 20:40] = True
    fig = plots.score_grid([imgs, [imgs[0], None, imgs[2]]], [["", "S=0.9\nN=0.8", "S=0.95\nN=0.4"], ["", "", "x"]],
                           ["anchor", "positive", "distractor"], contours=[[[(mask, "green")], [], []], []],
                           title="grid")
    _png_ok(plots.savefig(fig, tmp_path / "grid.png"))

    fig = plots.radar_plot({"frozen": {"a": 0.3, "b": 0.5, "c": 0.2}, "NearID": {"a": 0.4, "b": 0.6, "c": 0.1}},
                           reference="NearID", title="radar")
    _png_ok(plots.savefig(fig, tmp_path / "radar.png"))
    fig = plots.radar_plot({"frozen": {"a": 0.3, "b": 0.5}}, title="two axes padded")
    _png_ok(plots.savefig(fig, tmp_path / "radar2.png"))

    df = pd.DataFrame({"source": ["a", "a", "b", "b"], "method": ["frozen", "NearID"] * 2, "ssr": [10, 90, 20, 95]})
    fig = plots.bar_compare(df, "source", "ssr", "method", title="bars", ref=95)
    _png_ok(plots.savefig(fig, tmp_path / "sub" / "bars.png"))


def test_anchor_distributions_one_box_per_factor_and_encoder(tmp_path):
    rng = np.random.default_rng(0)
    wide = pd.DataFrame([{"encoder": e, "anchor_id": f"a{i}", "identity": rng.normal(1), "background": rng.normal(),
                          "viewpoint": rng.normal()} for e in ("mine", "clip") for i in range(6)])
    fig = plots.anchor_distributions(wide, ["identity", "background", "lighting"], {"mine": "My encoder"})
    ax = fig.axes[0]
    # absent factor dropped; each factor says which way is better (issue 57)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["identity\n(higher is better)",
                                                            "background\n(lower is better)"]
    assert "0 = chance" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["My encoder", "clip"]
    assert len(ax.patches) + len(ax.lines) >= 4                     # 2 factors x 2 encoders boxes drawn
    plots.save(fig, tmp_path / "anchors.png")
    _png_ok(tmp_path / "anchors.png")


def test_image_grid_cells_titles_and_row_labels(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "a.png"
    Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(path)
    pil = Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
    fig = plots.image_grid([[path, pil, None], [None, path, pil]], ["positive", "S1", "S2"], ["id/1", "id/2"],
                           title="sources")
    axes = fig.axes
    assert len(axes) == 6 and [a.get_title() for a in axes[:3]] == ["positive", "S1", "S2"]
    assert [len(a.images) for a in axes] == [1, 1, 0, 0, 1, 1]          # None: an empty cell
    assert [t.get_text() for t in axes[0].texts + axes[3].texts] == ["id/1", "id/2"]
    assert fig._suptitle.get_text() == "sources"
    assert np.array_equal(axes[0].images[0].get_array(), np.asarray(Image.open(path)))
    _png_ok(plots.savefig(fig, tmp_path / "grid.png"))


def _texts(fig) -> set[str]:
    out = set()
    for ax in fig.axes:
        out |= {t.get_text() for t in ax.get_yticklabels() + ax.get_xticklabels()}
        out |= {ax.get_xlabel(), ax.get_ylabel(), ax.get_title()}
    for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        out |= {t.get_text() for t in leg.get_texts()}
    return out


def _legend_clear_of_labels(fig):
    """No legend covers an axis label or tick label (issue 53: Table 7's legend sat on "SSR (%)")."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    for ax in fig.axes:
        for t in [ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels()]:
            if t.get_text():
                for leg in legends:
                    assert not leg.get_window_extent(r).overlaps(t.get_window_extent(r)), t.get_text()


def _legend_clear_of_data(fig):
    """Every figure-level legend lies below the axes (never over a bar or a line)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for leg in fig.legends:
        lb = leg.get_window_extent(r)
        for ax in fig.axes:
            assert lb.y1 <= ax.get_window_extent(r).y0 + 1, "legend overlaps a plot"


def test_issue38_figures_carry_human_labels_and_keep_legends_off_the_data():
    from nearid_lib.fpr.figures import plot_gallery_ablation
    from nearid_lib.idsim.eval_suite import METRIC_LABELS

    t = pd.DataFrame([{"metric_id": m, "model": f"model {k}", "value": 0.1 * (k + 1)}
                      for m in ("cute_easy_acc", "pods_ap", "dreambench_kendall") for k in range(5)])
    fig = plots.metric_bars(t, "metric_id", "model", "value", labels=METRIC_LABELS, title="x")
    txt = _texts(fig)
    assert {"CUTE Easy Acc", "PODS AP", "DreamBench++ Kendall", "score (higher is better)"} <= txt
    assert "cute_easy_acc" not in txt and {f"model {k}" for k in range(5)} <= txt
    _legend_clear_of_data(fig)
    abl = pd.DataFrame([{"ablation": a, "value": v, "encoder": e, "queries": q, "map": 0.5, "sim": 0.7}
                        for a in ("images_per_subject", "subjects") for v in (1, 3) for e in
                        ("efficientnet-lite0", "nearid", "efficientnet-lite0@random") for q in ("oracle", "generated")])
    fig = plot_gallery_ablation(abl, "mini")
    txt = _texts(fig)
    assert {"mAP", "mean similarity (cosine)", "NearID head", "oracle queries", "generated queries",
            "efficientnet-lite0, random init (chance)"} <= txt
    assert len(fig.legends[0].get_texts()) == 5                       # 3 encoders + 2 query kinds, not 12
    _legend_clear_of_data(fig)
    t1 = pd.DataFrame({"ours_label": ["frozen", "head"], "nearid_ssr": [40.0, 80.0], "nearid_pa": [55.0, 90.0],
                       "nearid_ssr_sd": [np.nan, 2.0], "nearid_pa_sd": [np.nan, 1.0]})
    # issue 53: the average rows (a group "avg_*", the reported-apart one among them, whose
    # training_source is empty) are Table 1's, not sources: neither drawn nor starred
    t5 = pd.DataFrame({"source": ["a", "b", "hard", "Avg. (all)", "Reported apart"] * 2,
                       "group": ["training", "unseen", "apart", "avg_all", "avg_apart"] * 2,
                       "ours_label": ["frozen"] * 5 + ["head"] * 5, "ssr": [30.0, 40, 3, 35, 3, 80, 85, 25, 82, 25],
                       "ssr_sd": [np.nan] * 5 + [1.0, 2.0, 1.5, 1.0, 1.5],
                       "training_source": [True, False, False, np.nan, np.nan] * 2})
    t7 = pd.DataFrame({"ours_label": ["frozen", "head"], "full_ssr": [40.0, 80], "fg_ssr": [60.0, 85],
                       "full_ssr_sd": [np.nan, 1.8], "fg_ssr_sd": [np.nan, 1.0]})
    fig = plots.bench_overview(t1, t5, t7, "mini")
    txt = _texts(fig)
    assert {"a*", "b", "hard", "SSR (%)", "percent (test identities)", "Table 7: full image",
            "Table 7: foreground only"} <= txt
    assert not {"Avg. (all)", "Reported apart", "Reported apart*", "hard*"} & txt
    # the seeds' sd as error bars on the trained rows only: Table 1 (2 bars), Table 5 (3 sources), Table 7 (2)
    drawn = [sum(sum(len(seg) > 0 for seg in c.errorbar.lines[2][0].get_segments())    # NaN sd: an empty segment
                 for c in ax.containers if getattr(c, "errorbar", None) is not None and c.errorbar.lines[2])
             for ax in fig.axes]
    assert drawn == [2, 3, 2]
    _legend_clear_of_data(fig)
    _legend_clear_of_labels(fig)
