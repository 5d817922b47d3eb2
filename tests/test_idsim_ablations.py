"""ID-Sim training ablations (Table 3, Supp. Tables 8-9): rows match the paper's tables, overrides
are valid profile fields, the summary table by hand, one short end-to-end run on the smoke world."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from nearid_lib.config import get_profile
from nearid_lib.idsim.ablations import ABLATIONS, ablation_runs, ablation_table, row_profile
from nearid_lib.report import paper_values_dir


@pytest.mark.parametrize("table", sorted(ABLATIONS))
def test_rows_are_the_paper_rows_and_valid_overrides(table):
    key_col, rows = ABLATIONS[table]
    meta = json.loads((paper_values_dir() / f"{table}.meta.json").read_text())
    paper = pd.read_csv(paper_values_dir() / f"{table}.csv")
    assert meta["key_columns"] == [key_col]
    from nearid_lib.idsim.ablations import OUTPUTS
    assert meta["ours"] == f"tables/{OUTPUTS[table]}.csv"
    assert list(rows) == paper[key_col].tolist()
    cfg = get_profile("smoke")
    for role, ov in rows.values():
        rc = row_profile(cfg, ov, 5)
        assert rc.seed == 5 and all(getattr(rc.idsim, k) == v for k, v in ov.items())
    with pytest.raises(KeyError, match="unknown"):
        row_profile(cfg, {"nope": 1}, 0)


def test_ablation_table_by_hand():
    u1 = pd.DataFrame({"unit": ["a", "b"], "correct": [1.0, 0.0], "auc_anchor": [1.0, 0.5]})
    u2 = pd.DataFrame({"unit": ["a", "b"], "correct": [1.0, 1.0], "auc_anchor": [0.5, 0.5]})
    runs = pd.DataFrame([
        {"table": "idsim_supp_table8_cls_patch", "row": "CLS Loss Only", "role": "ablation", "seed": 0,
         "real_instance_val_acc": 0.5, "identity_val_roc_auc": 0.7, "units": u1},
        {"table": "idsim_supp_table8_cls_patch", "row": "CLS Loss Only", "role": "ablation", "seed": 1,
         "real_instance_val_acc": 1.0, "identity_val_roc_auc": 0.9, "units": u2}])
    t = ablation_table(runs, "idsim_supp_table8_cls_patch", n_boot=200)
    assert len(t) == 1
    r = t.iloc[0]
    assert r.feature_loss_setting == "CLS Loss Only" and r.n_seeds == 2 and r.n_val_identities == 2
    assert r.real_instance_val_acc == pytest.approx(0.75) and r.identity_val_roc_auc == pytest.approx(0.8)
    # seed-averaged units: a -> correct 1, auc 0.75; b -> correct 0.5, auc 0.5
    assert r.anchor_auc == pytest.approx(0.625)
    assert 0.5 <= r.acc_low <= 0.75 <= r.acc_high <= 1.0
    assert r.acc_per_seed == "0.500 1.000"
    runs["table"] = "idsim_table3_data_ablation"
    runs["row"] = "all_balanced"
    t3 = ablation_table(runs, "idsim_table3_data_ablation", n_boot=50)
    assert t3.val_score.iloc[0] == pytest.approx(0.8) and t3.row_id.iloc[0] == "all_balanced"


def test_ablation_runs_smoke_world(smoke_world):
    cfg = get_profile("smoke", {"idsim.n_seeds": 1})
    logs = []
    runs = ablation_runs(cfg, smoke_world, ["idsim_supp_table8_cls_patch"], log=logs.append)
    assert runs.row.tolist() == list(ABLATIONS["idsim_supp_table8_cls_patch"][1])
    assert runs.real_instance_val_acc.between(0, 1).all() and runs.identity_val_roc_auc.between(0, 1).all()
    t = ablation_table(runs, "idsim_supp_table8_cls_patch", n_boot=100)
    assert len(t) == 3 and (t.n_seeds == 1).all()
    # each row trains its own loss: the final training losses differ (overrides reached the trainer)
    assert runs.final_loss.notna().all() and runs.final_loss.round(9).nunique() == 3
    assert (runs.n_steps > 0).all()


def test_ablation_claims_compare_full_recipe_with_other_rows():
    from nearid_lib.idsim.ablations import ablation_claims

    t = pd.DataFrame({"feature_loss_setting": ["CLS + Patch (Baseline)", "CLS Loss Only"], "role": ["ours", "ablation"],
                      "identity_val_roc_auc": [0.8, 0.85], "real_instance_val_acc": [0.7, 0.6],
                      "anchor_auc": [0.8, 0.8], "anchor_auc_low": [0.7, 0.7], "anchor_auc_high": [0.9, 0.9],
                      "acc_low": [0.6, 0.5], "acc_high": [0.8, 0.7]})
    (row,) = ablation_claims({"idsim_supp_table8_cls_patch": t}, "mini")
    assert row["holds"] is False and "0.800 vs best other 0.850" in row["ours"]
    assert row["key"] == "idsim.supp8"             # a failing ablation claim can link to its explanation
    t.loc[1, "identity_val_roc_auc"] = 0.75
    assert ablation_claims({"idsim_supp_table8_cls_patch": t}, "mini")[0]["holds"] is True
    assert ablation_claims({"idsim_supp_table5_scale": t}, "mini") == []      # no such claim in the paper


def test_dynamic_tables_rows_follow_the_profile():
    from nearid_lib.idsim.ablations import DYNAMIC, OUTPUTS, table_rows

    cfg = get_profile("mini")
    key_col, rows = table_rows("idsim_supp_table5_scale", cfg)
    paper = pd.read_csv(paper_values_dir() / "idsim_supp_table5_scale.csv")
    assert list(rows) == paper[key_col].tolist()
    n = cfg.idsim.n_triplets
    assert [ov.get("n_triplets", n) for _, ov in rows.values()] == [n // 2, n, 2 * n, 3 * n]
    key_col, rows = table_rows("idsim_supp_table6_composition", cfg)
    assert list(rows) == pd.read_csv(paper_values_dir() / "idsim_supp_table6_composition.csv")[key_col].tolist()
    assert rows["Even Split"] == ("ours", {}) and rows["Subset 2a dominant"][1]["mix"] == (1.0, 2.0, 1.0)
    key_col, rows = table_rows("idsim_supp_table7_backbone", cfg)
    assert list(rows)[0].endswith("(Baseline)") and len(rows) == 1 + len(cfg.idsim.backbone_rows)
    assert {ov.get("backbone") for _, ov in rows.values()} >= {"efficientnet-lite1", "efficientnet-lite2"}
    for key in DYNAMIC:
        meta = json.loads((paper_values_dir() / f"{key}.meta.json").read_text())
        assert meta["key_columns"][0] == DYNAMIC[key][0] and meta["ours"] == f"tables/{OUTPUTS[key]}.csv"
    with pytest.raises(KeyError, match="unknown ablation table"):
        table_rows("nope", cfg)


def test_backbone_rows_train_on_their_own_prefix_cache(smoke_world):
    cfg = get_profile("smoke", {"idsim.n_seeds": 1})
    runs = ablation_runs(cfg, smoke_world, ["idsim_supp_table7_backbone"], log=lambda m: None)
    assert len(runs) == 2 and runs.final_loss.notna().all()
    t = ablation_table(runs, "idsim_supp_table7_backbone", n_boot=50)
    assert t.backbone_resolution.tolist() == ["dinov2-base @ native (Baseline)", "efficientnet-lite1 @ native"]


def test_claimed_tables_have_the_full_recipe_best_in_the_paper():
    from nearid_lib.idsim.ablations import CLAIM_KEYS, CLAIMED, table_rows

    assert set(CLAIM_KEYS) == set(CLAIMED) and len(set(CLAIM_KEYS.values())) == len(CLAIMED)

    for key in CLAIMED:
        key_col, rows = table_rows(key, get_profile("mini"))
        paper = pd.read_csv(paper_values_dir() / f"{key}.csv").set_index(key_col)
        paper = paper["val_score" if "val_score" in paper.columns else "identity_val_roc_auc"]
        best = [r for r, (role, _) in rows.items() if role == "ours"][0]
        assert paper[best] > paper.drop(best).max()


def test_pick_placement_by_hand():
    from nearid_lib.idsim.ablations import pick_placement

    t = pd.DataFrame({"adapt_stages": [1, 2, 3], "identity_val_roc_auc": [0.70, 0.80, 0.75]})
    assert pick_placement(t) == 2
    t.loc[2, "identity_val_roc_auc"] = 0.80                    # a tie goes to fewer adapted stages
    assert pick_placement(t) == 2
    t.loc[0, "identity_val_roc_auc"] = 0.80
    assert pick_placement(t) == 1


def test_choose_placement_trains_each_candidate_on_val(smoke_world):
    """The placement is chosen on val before the model trains (tiny EfficientNet: adapters on the
    last 0 or 1 stages are different models): one row per candidate, the pick by the rule, the
    profile with it; without choices it is an error."""
    from dataclasses import replace

    from nearid_lib.idsim.ablations import choose_placement, pick_placement

    cfg = get_profile("smoke", {"idsim.backbone": "efficientnet-lite0", "idsim.n_seeds": 1,
                                "idsim.adapt_stages_choices": (0, 1)})
    p = choose_placement(cfg, smoke_world, log=lambda m: None)
    assert p.table.adapt_stages.tolist() == [0, 1] and p.table.chosen.sum() == 1
    assert p.chosen == pick_placement(p.table) and p.profile.idsim.adapt_stages == p.chosen
    # "ours" is the chosen placement, whatever the profile's preset (smoke's is 1)
    assert p.table.role.tolist() == ["ours" if c else "candidate" for c in p.table.chosen]
    q = choose_placement(replace(cfg, idsim=replace(cfg.idsim, adapt_stages=0)), smoke_world, log=lambda m: None)
    assert q.table.role.tolist() == p.table.role.tolist()
    assert p.table.identity_val_roc_auc.between(0, 1).all() and (p.table.n_seeds == 1).all()
    with pytest.raises(ValueError, match="adapt_stages_choices is empty"):
        choose_placement(get_profile("smoke"), smoke_world)


def test_a_recipe_trained_in_one_cell_is_reused_by_the_others(smoke_world):
    """Notebook 09's order: the placement candidates, then the model's seeds, then an ablation
    table. The chosen candidate is the model's first seed and the baseline row of the table, so
    each trains once; and the reused model is, to the bit, the one train_idsim trains alone from
    scratch (torch is seeded before the first step, not only before the model is built)."""
    from dataclasses import replace

    import torch

    from nearid_lib.idsim.ablations import choose_placement
    from nearid_lib.idsim.train import TrainedRuns, train_idsim, train_idsim_seeds

    cfg = get_profile("smoke", {"idsim.backbone": "efficientnet-lite0", "idsim.n_seeds": 1,
                                "idsim.adapt_stages_choices": (0, 1)})
    trained = TrainedRuns()
    p = choose_placement(cfg, smoke_world, log=lambda m: None, trained=trained)
    assert (trained.trained, trained.reused) == (2, 0)
    runs = train_idsim_seeds(p.profile, smoke_world, log=lambda m: None, trained=trained)
    assert (trained.trained, trained.reused) == (2, 1)
    alone = train_idsim(replace(p.profile, seed=int(p.profile.seed)), smoke_world, log=lambda m: None)["model"]
    got, ref = runs[0]["model"].state_dict(), alone.state_dict()
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)
    abl = ablation_runs(p.profile, smoke_world, ["idsim_supp_table8_cls_patch"], log=lambda m: None, trained=trained)
    assert (trained.trained, trained.reused) == (4, 2)       # patch-only and CLS-only are new; the baseline is not
    base = abl[abl.role == "ours"].iloc[0]
    assert base.real_instance_val_acc == p.table[p.table.chosen].real_instance_val_acc.iloc[0]
    # another seed, recipe or augmentation seed is another run
    keys = {TrainedRuns.key(c, smoke_world, s) for c, s in
            [(p.profile, 0), (replace(p.profile, seed=1), 0), (p.profile, 1),
             (row_profile(p.profile, {"lam": 0.0}, 0), 0)]}
    assert len(keys) == 4


def test_a_finished_training_is_loaded_by_a_rerun(smoke_world, tmp_path):
    """TrainedRuns with a folder writes every finished run there; a new instance (a rerun of the
    notebook) loads it instead of training, and the loaded model, history and store are the
    trained ones (the model tensor by tensor, its embeddings to the bit)."""
    import pandas as pd
    import torch

    from nearid_lib.idsim.embed import model_embeddings
    from nearid_lib.idsim.train import TrainedRuns, train_idsim_seeds

    cfg = get_profile("smoke", {"idsim.backbone": "efficientnet-lite0", "idsim.n_seeds": 2})
    first = TrainedRuns(tmp_path / "runs", store_path=tmp_path / "prefix")
    runs = train_idsim_seeds(cfg, smoke_world, log=lambda m: None, trained=first)
    assert (first.trained, first.loaded) == (2, 0) and len(list((tmp_path / "runs").iterdir())) == 2
    again = TrainedRuns(tmp_path / "runs", store_path=tmp_path / "prefix")
    loaded = train_idsim_seeds(cfg, smoke_world, log=lambda m: None, trained=again)
    assert (again.trained, again.loaded, again.reused) == (0, 2, 2)
    for a, b in zip(runs, loaded):
        sa, sb = a["model"].state_dict(), b["model"].state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        pd.testing.assert_frame_equal(a["history"], b["history"])
        assert b["n_steps"] == a["n_steps"] and b["store"].seed == a["store"].seed
    keys = runs[0]["triplets"].anchor.head(6).tolist()
    ea = model_embeddings(runs[0]["model"], runs[0]["store"], keys, kinds=("cls",))["cls"]
    eb = model_embeddings(loaded[0]["model"], loaded[0]["store"], keys, kinds=("cls",))["cls"]
    assert ea.keys() == eb.keys() and all((ea[k] == eb[k]).all() for k in ea)
    # another recipe is another folder: nothing to load
    other = TrainedRuns(tmp_path / "runs", store_path=tmp_path / "prefix")
    assert other.lookup(row_profile(cfg, {"lam": 0.0}, 0), smoke_world, 0) is None and other.loaded == 0
