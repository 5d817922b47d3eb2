"""Help that is enough to build the inputs (issue 57, item 4): `nearid dbpp-mh --help` shows the
folder, file and key layout that the release (here: its fixture in the published layout) really has;
`nearid rank --help` documents every option and every input and output column; `dbpp-mh` warns when
`all4` pools fewer than four categories; the chance level of retrieval AP is a random ranking's."""
from __future__ import annotations

import itertools
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from nearid_lib.cli import build_parser, main


def _help(command: str) -> str:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices[command].format_help()


def _layout_patterns(text: str) -> list[re.Pattern]:
    """The file layout lines of dbpp-mh's help (``data_..._rating/...json``) as path regexes."""
    pats = []
    for line in text.splitlines():
        m = re.match(r"\s+(data_\S+\.json)\s", line)
        if m:
            rx = re.escape(m.group(1)).replace(re.escape("<scorer>"), r"[a-z0-9_]+")
            rx = rx.replace(re.escape("<method>"), r"[a-z0-9_]+").replace(re.escape("group1"), "group1")
            pats.append(re.compile(rx + "$"))
    return pats


def test_dbpp_mh_help_shows_the_layout_of_the_released_ratings(tmp_path):
    from tools.paper_fixtures.dbpp import write_ratings

    text = _help("dbpp-mh")
    for must in ("data_<scorer>_rating/<method>.json", "data_gpt_rating/concept_preservation_full/<method>.json",
                 "data_human_rating/merged_data/group1/<method>-cp.json", "group2/<method>-cp.json",
                 "<category>_<NN>_<subject>-<prompt>[_<k>]", "rubik's_cube", "magic_cube", "--scores NAME=DIR",
                 "scorer, category, method, r, r_spread, n", "fisher_z", "all4", "human_human"):
        assert must in text, must
    # every file of a ratings folder in the release's layout matches a layout line of the help, and
    # every key the key line describes
    root = write_ratings(tmp_path / "ratings")
    pats = _layout_patterns(text)
    assert len(pats) == 4
    files = [p.relative_to(root).as_posix() for p in root.rglob("*.json")]
    assert files and all(any(p.match(f) for p in pats) for f in files), files
    key = re.compile(r"(live_subject_animal|live_subject_human|object|style)_\d\d_[a-z_']+-\d+(_\d+)?$")
    for f in root.rglob("*.json"):
        assert all(key.match(k) for k in json.loads(f.read_text())), f


def test_dbpp_mh_warns_when_all4_pools_fewer_than_four_categories(tmp_path, capsys):
    from tools.paper_fixtures.dbpp import write_ratings

    full = write_ratings(tmp_path / "full")
    assert main(["dbpp-mh", str(full), "--out", str(tmp_path / "full.csv"), "--profile", "smoke"]) == 0
    assert "warning" not in capsys.readouterr().err
    two = tmp_path / "two"
    shutil.copytree(full, two)
    for f in two.rglob("*.json"):                  # keep two of the four categories
        d = json.loads(f.read_text())
        f.write_text(json.dumps({k: v for k, v in d.items() if k.startswith(("live_subject_animal", "object"))}))
    assert main(["dbpp-mh", str(two), "--out", str(tmp_path / "two.csv"), "--profile", "smoke"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("nearid dbpp-mh: warning: all4 is the Fisher-z mean of 2 of the 4 "
                                               "categories (live_subject_animal, object), not of all four, for ")
    mh = pd.read_csv(tmp_path / "two.csv")
    assert set(err[0].split(", for ")[1].split(", ")) == set(mh.scorer)     # every scorer named, once


def test_rank_help_documents_every_option_and_column(smoke_world, tmp_path):
    from nearid_lib.data.fpr_layout import FPR_COLUMNS, OPTIONAL_COLUMNS
    from nearid_lib.fpr import rank_generator

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["rank"]
    text = sub.format_help()
    for action in sub._actions:
        if action.dest == "help":
            continue
        assert action.help and len(action.help) > 20, action.dest
        assert (action.option_strings[0] if action.option_strings else action.metavar) in text
    for opt in ("--sim-to", "--background", "--batch-size", "--group-by", "--references", "--method"):
        assert opt in text
    # every column of the three input tables and of the printed / written summary is explained
    for col in (*FPR_COLUMNS, *OPTIONAL_COLUMNS):
        assert re.search(rf"^\s+{col}\s", text, re.M), col
    assert "ref_path   a reference image of the identity" in text and "on gallery and reference" in text
    assert "relative to the CSV's folder" in text
    fpr = smoke_world.root / "fpr"
    gal = pd.read_csv(fpr / "gallery_data.csv")
    gen = gal.groupby("name", sort=False).head(1).assign(method="copy")      # a "generator" copying the gallery
    for c in ("file_path", "ref_path", "mask_path"):
        gen[c] = [str(smoke_world.root / p) for p in gen[c]]
    summary = rank_generator(gen, fpr / "gallery_data.csv", "efficientnet-lite0", tiny=True, progress=False).summary
    for col in summary.columns:
        if col not in ("method", "encoder"):
            assert re.search(rf"^\s+({col}\b|[a-z_, ]*\b{col}\b)", text.split("output:")[1], re.M), col


def test_random_ranking_ap_is_the_mean_ap_over_every_ordering():
    """The chance level `rank` prints, against a slow, obvious reference: every permutation."""
    from nearid_lib.metrics import average_precision, random_ranking_ap

    for n, r in [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 3), (6, 6), (7, 1)]:
        rel = np.array([1] * r + [0] * (n - r), bool)
        aps = [average_precision(-np.arange(n), rel[list(p)]) for p in itertools.permutations(range(n))]
        assert random_ranking_ap(n, r) == pytest.approx(float(np.mean(aps)), abs=1e-12), (n, r)
    assert random_ranking_ap(3, 1) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)       # by hand: E[1/rank]
    with pytest.raises(ValueError, match="need 1 <= relevant"):
        random_ranking_ap(3, 0)
