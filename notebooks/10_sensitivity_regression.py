# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 10 - Selective sensitivity (ID-Sim Figure 6, Appendix F)
# For every anchor of the world's edit grids (identity change x background | viewpoint | lighting)
# we regress the similarity of each grid image to its anchor on factor_change and identity_change
# (OLS over the whole grid), take sensitivity = -slope, average over anchors and bootstrap over
# anchors (1,000 resamples, seeded) for 95% percentile intervals. Encoders: the frozen backbone
# (EfficientNet-Lite0 GAP in mini), ID-Sim (notebook 09's checkpoint) and the NearID head
# (notebook 03's checkpoint; skipped with a note when absent), the trained two at every training
# seed: their rows are seed means. Similarities are raw cosines.
#
# `paper`: ID-Sim's selective-sensitivity edit grids are not published and the released NearID data
# has no world grids, so this notebook's tables are skipped with that reason
# (`nearid_lib.idsim.released.SENSITIVITY_REASON`).

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
from IPython.display import display

from nearid_lib import make_rng
from nearid_lib.claims import evaluate_claims
from nearid_lib.idsim.embed import model_embeddings
from nearid_lib.idsim.eval_suite import embed_encoders, encoder_labels
from nearid_lib.idsim.claims import CLAIMS_BY_NOTEBOOK, IDSIM_CLAIMS, sensitivity_evidence
from nearid_lib.idsim.model import load_idsim_seeds
from nearid_lib.idsim.prefix import PrefixStore
from nearid_lib.idsim.released import SENSITIVITY_REASON
from nearid_lib.idsim.sensitivity import (plot_sensitivity_bars, plot_similarity_curves, run_sensitivity,
                                          similarity_curves)
from nearid_lib.io_utils import write_csv
from nearid_lib.models import load_encoder
from nearid_lib.models.published import published_seeds
from nearid_lib.paths import cache_dir, checkpoint_dir
from nearid_lib.run import setup_notebook

nb = setup_notebook(PROFILE, SEED, "10_sensitivity_regression")
run, cfg, data = nb.run, nb.cfg, nb.data
grids = data.grids
GRIDS = grids is not None               # the released data (paper) has no edit grids
if GRIDS:
    print(grids.groupby("grid").anchor_id.nunique(), grids.groupby("grid").size())
else:
    for name in ("10_sensitivity", "claims_10_sensitivity"):
        run.skip_table(name, SENSITIVITY_REASON)

# %%
if GRIDS:
    # every training seed of notebook 09's ID-Sim (the published checkpoint first)
    models = load_idsim_seeds(checkpoint_dir(PROFILE) / "idsim")
    model = next(iter(models.values()))
    # every training seed of notebook 03's NearID head (the published one first)
    nearid_dir = checkpoint_dir(PROFILE) / "nearid"
    nearids = ({s: load_encoder("nearid", checkpoint=d)[0] for s, d in published_seeds(nearid_dir).items()}
               if nearid_dir.exists() else {})
    nearid = next(iter(nearids.values()), None)
    notes = [] if nearid is not None else [f"NearID head skipped: {nearid_dir} absent (run notebook 03)"]
    print(notes or f"NearID head seeds: {list(nearids)}", "| ID-Sim seeds:", list(models))
    store = PrefixStore(model, data, n_variants=0, seed=SEED,
                        path=cache_dir(PROFILE) / "idsim" / f"eval_prefix_s{SEED}")
    paths = grids.path.tolist()
    # one pass of the frozen prefix for the backbone, ID-Sim and every NearID seed's head
    emb = embed_encoders(model, store, paths, heads={f"nearid.seed{s}": m for s, m in nearids.items()})
    idsim_emb = {s: model_embeddings(m, store, paths)["cls"] if m is not model else emb["idsim"]
                 for s, m in models.items()}
    nearid_emb = {s: emb.pop(f"nearid.seed{s}") for s in nearids}
    emb.pop("idsim")
    store.save()

# %% [markdown]
# ## Per-anchor regressions and bootstrap over anchors

# %%
if GRIDS:
    # the rng key keeps this notebook's former number: the same bootstrap draws as before the renumbering
    # ID-Sim's rows: each seed regressed on its own, the table and figures show their mean per anchor
    sens = run_sensitivity(grids, emb, cfg.idsim.n_bootstrap, make_rng(SEED, "09_sensitivity_bootstrap"),
                           seeded={"idsim": idsim_emb, **({"nearid": nearid_emb} if nearid_emb else {})})
    sims, wide, summary = sens.sims, sens.wide, sens.summary
    write_csv(sims, run.results / "grid_similarities.csv")
    write_csv(sens.fits, run.results / "per_anchor_fits.csv")
    labels = encoder_labels(cfg)
    table = summary.assign(
        model=[labels[e][0] for e in summary.encoder], ours_label=[labels[e][1] for e in summary.encoder],
        claim_id=[f"{labels[e][0]}/{f}" for e, f in zip(summary.encoder, summary.factor)])
    n_seeds = {"idsim": len(idsim_emb), "nearid": len(nearid_emb)}                      # trained: the seed mean
    table["n_seeds"] = [n_seeds.get(e, 1) for e in table.encoder]
    table = table[["claim_id", "model", "factor", "estimate", "mean", "std", "low", "high", "n", "n_boot",
                   "n_seeds", "r2_mean", "ours_label", "encoder"]]
    run.write_table(table, "10_sensitivity")
    display(table)

# %%
if GRIDS:
    short = {"frozen": f"frozen {cfg.idsim.backbone}", "idsim": "ID-Sim", "nearid": "NearID head"}
    fig = plot_sensitivity_bars(summary, short, title=f"Selective sensitivity, bootstrap mean and 95% CI ({PROFILE}, "
                                                      f"{wide.anchor_id.nunique()} anchors)")
    display(run.figure(fig, "10_sensitivity_bars"))

# %%
if GRIDS:
    curves = similarity_curves(sims)
    write_csv(curves, run.results / "similarity_curves.csv")
    fig = plot_similarity_curves(curves, short, title=f"Similarity to the anchor vs change level ({PROFILE})")
    display(run.figure(fig, "10_similarity_curves"))

# %% [markdown]
# ## Claims
# ID-Sim (paper) and the NearID head (our question) should be more identity-sensitive and less
# background-sensitive than the frozen backbone: declared in `nearid_lib/idsim/claims.py`, judged on
# the paired 95% bootstrap interval of the difference over grid anchors and, for ID-Sim and the
# NearID head, their training seeds (a claim whose encoder was not run is "not testable").

# %%
if GRIDS:
    claims = evaluate_claims(IDSIM_CLAIMS, sensitivity_evidence(wide, per_seed=sens.per_seed),
                             make_rng(SEED, "claims", "10"), profile=PROFILE,
                             keys=CLAIMS_BY_NOTEBOOK["10_sensitivity_regression"])
    run.write_claims(claims, "10_sensitivity")
    display(claims[["claim", "ours", "verdict"]])
