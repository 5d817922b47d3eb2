"""The FPR reproduction of notebook 11, stage by stage: galleries and methods, encoders, the
protocol (oracle and generated images), the DB++ column, the per-dataset tables, the gallery
ablations, background removal, the retrieval lists and the claims.

Every profile runs the same stages in the same order. Each stage is one function of an
:class:`FPRStudy` (what the stages share: the run, its data, encoders and results so far) that
computes what the profile has, writes its tables (``Run.write_table``) and figures
(``Run.figure``), and returns what the notebook shows: a table, or a list of tables and figures,
empty (or None) where the profile does not produce it. Tables a run cannot produce are recorded
once, with their reasons, by :func:`skipped_tables` (``Run.skip_table``), before anything is
scored::

    study = open_study(run)
    gallery_data(study); encoder_table(study); skipped_tables(study); run_protocol(study)
    oracle_results(study); main_results(study); ...; claims_results(study)

The stages call the experiment functions of :mod:`.experiments`, :mod:`.ablations`,
:mod:`.authors_ablations`, :mod:`.dbpp_column`, :mod:`.tables`, :mod:`.figures`, :mod:`.seeds`
and :mod:`.claims`; the order of the stages is the order of the work (random draws, cached
embeddings and the provenance of each table follow it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..data.fpr_layout import FPRSplit
from ..features import FeatureStore
from ..io_utils import write_csv
from ..models.published import published_seeds
from ..paths import cache_dir
from ..runtime.seeding import make_rng
from .ablations import background_ablation, background_note
from .authors_ablations import gallery_ablation, sampling_table
from .claims import retrieval_claims
from .dbpp_column import DbppColumn, dbpp_columns, with_generated_dbpp, with_oracle_dbpp
from .experiments import (
    EncoderSpec,
    FPRRun,
    ablation_pool_of,
    background_removed,
    encoder_specs,
    load_encoders,
    method_sources,
    prepare_data,
    qualitative_cases,
    run_fpr,
    sampling_encoder,
    sampling_size,
    skip_reasons,
)
from .figures import plot_background, plot_gallery_ablation, plot_main, plot_retrieval_lists
from .seeds import specialised_seed_runs
from .tables import chance_table, dataset_view, generated_table, split_by_dataset

if TYPE_CHECKING:
    from ..config import Profile
    from ..run import Run

__all__ = ["FPRStudy", "open_study", "gallery_data", "method_sources_table", "encoder_table", "skipped_tables",
           "run_protocol", "score_dbpp", "oracle_results", "main_results", "chance_results", "main_figures",
           "per_dataset_results", "agreement_results", "gallery_ablation_results", "sampling_results",
           "background_results", "retrieval_list_figures", "claims_results"]

# the columns of the main comparison the notebook shows (those present)
MAIN_COLUMNS = ("method", "drift", "context", "encoder", "sim", "map", "top1", "auc", "ndcg")
# the methods whose retrieval lists Figure 4 shows (the first three methods where these are absent)
LIST_METHODS = ("faithful", "drift_high", "copy_paste")


@dataclass
class FPRStudy:
    """What the stages of notebook 11 share: the ``run``, the embedding ``cache``, the data
    (``split``: references and gallery, ``generated``: the methods' images, ``dataset``: the name
    of the whole, ``pool``: the FPR authors' Re-ID ablation pools or None), the encoders (``specs``,
    the loaded ``models``), the tables this run cannot produce (``skips``: name -> reason), the
    protocol's scores (``scores``), the DB++ column (``dbpp``, None outside the released data),
    the oracle table as written (``oracle``), the background-removed copies (``removed``, made by
    ``removed_by``; ``no_removal``: why there are none) and the background ablation's per-query
    APs (``bg_pq``)."""

    run: Run
    cache: FeatureStore
    split: FPRSplit | None = None
    generated: pd.DataFrame | None = None
    dataset: str = ""
    pool: pd.DataFrame | None = None
    specs: list[EncoderSpec] = field(default_factory=list)
    models: dict[str, Any] = field(default_factory=dict)
    skips: dict[str, str] = field(default_factory=dict)
    scores: FPRRun = field(default_factory=FPRRun)
    dbpp: DbppColumn | None = None
    oracle: pd.DataFrame | None = None
    removed: tuple[pd.DataFrame, pd.DataFrame] | None = None
    removed_by: str | None = None
    no_removal: str | None = None
    bg_pq: pd.DataFrame | None = None

    @property
    def cfg(self) -> Profile:
        """The run's resolved profile."""
        return self.run.cfg

    @property
    def seed(self) -> int:
        """The notebook's seed."""
        return self.run.seed

    @property
    def profile(self) -> str:
        """The profile's name (in the figures' titles)."""
        return self.run.profile

    @property
    def have_refs(self) -> bool:
        """Whether the run scores reference images (the oracle table is not skipped)."""
        return "11_fpr_oracle" not in self.skips

    @property
    def have_gen(self) -> bool:
        """Whether the run scores generated images (the generated tables are not skipped)."""
        return "11_fpr_generated" not in self.skips

    @property
    def scored_generated(self) -> pd.DataFrame | None:
        """The generated images the protocol scores: None when their tables are skipped."""
        return self.generated if self.have_gen else None

    def dbpp_sidecar(self) -> dict:
        """What the sidecar of a table with a ``dbpp`` column records about it (nothing without one)."""
        return self.dbpp.sidecar() if self.dbpp is not None else {}


def open_study(run: Run) -> FPRStudy:
    """The study of ``run``: its embedding cache (``cache_dir(profile)/"retrieval"``), nothing loaded yet."""
    return FPRStudy(run, FeatureStore(cache_dir(run.profile) / "retrieval"))


def gallery_data(study: FPRStudy) -> pd.DataFrame:
    """Stage "data": the reference set, the gallery and the methods' images of the profile
    (:func:`~.experiments.prepare_data`) and the authors' ablation pools
    (:func:`~.experiments.ablation_pool_of`); prints their counts and returns one row per method."""
    study.split, study.generated, study.dataset = prepare_data(study.cfg, progress=True)
    study.pool = ablation_pool_of(study.split)
    split, generated = study.split, study.generated
    print(f"{split.train.name.nunique()} identities in {split.train.species.nunique()} species; "
          f"{len(split.train)} references, {len(split.gallery)} gallery images, {len(generated)} generated "
          f"({generated.method.nunique()} methods)")
    return generated.drop_duplicates("method").drop(columns=["name", "file_path", "ref_path", "mask_path"],
                                                    errors="ignore")


def method_sources_table(study: FPRStudy) -> pd.DataFrame:
    """Stage "sources": where each method's images of each dataset come from
    (:func:`~.experiments.method_sources`), written as ``11_fpr_method_sources`` when the profile
    has any (the released data); empty for the simulated methods."""
    sources = method_sources(study.generated)
    if len(sources):
        study.run.write_table(sources, "11_fpr_method_sources")
    return sources


def encoder_table(study: FPRStudy) -> pd.DataFrame:
    """Stage "encoders": the profile's retrieval encoders, each loaded once
    (:func:`~.experiments.encoder_specs`, :func:`~.experiments.load_encoders`); one row per encoder
    with its role, whether it runs and why not."""
    study.specs = encoder_specs(study.cfg)
    study.models = load_encoders(study.specs)
    return pd.DataFrame([{"encoder": s.name, "role": s.role, "available": s.available, "note": s.note}
                         for s in study.specs])


def skipped_tables(study: FPRStudy) -> pd.DataFrame:
    """Stage "skips": the tables this run cannot produce (:func:`~.experiments.skip_reasons`: absent
    downloads, no generated images, no encoder), each recorded with its reason
    (``Run.skip_table``); returns them (columns ``table``, ``reason``; empty when none)."""
    study.skips = skip_reasons(study.split, study.generated, study.specs)
    for table_name, why in study.skips.items():
        study.run.skip_table(table_name, why)
    return pd.DataFrame(list(study.skips.items()), columns=["table", "reason"])


def run_protocol(study: FPRStudy) -> pd.DataFrame:
    """Stage "protocol": every encoder embeds the references, the gallery and the generated images
    (cached) and each retrieval is scored (:func:`~.experiments.run_fpr`: the oracle when the run
    has references, the methods' images when it has them). Returns the scored parts: per part
    (``oracle``, ``generated``) the per-query rows over all encoders, or why there are none."""
    study.scores = run_fpr(study.models, study.split, study.scored_generated, study.cfg, study.cache,
                           study.dataset, oracle=study.have_refs)
    parts = (("oracle", study.scores.oracle_per_query, "11_fpr_oracle"),
             ("generated", study.scores.per_query, "11_fpr_generated"))
    return pd.DataFrame([{"part": part, "per_query_rows": 0 if pq is None else len(pq),
                          "not_scored": study.skips.get(table, "") if pq is None else ""}
                         for part, pq, table in parts])


def score_dbpp(study: FPRStudy) -> str:
    """Stage "DB++": DreamBench++'s GPT concept-preservation score of the released galleries
    (:func:`~.dbpp_column.dbpp_columns`, with the reason when its gate is closed); none for a
    procedural world or a run without references. Returns what the column holds this run."""
    if study.cfg.world.source != "released":
        return "DB++ column: none (the procedural world has no DreamBench++ judge)"
    if not study.have_refs:
        return "DB++ column: none (no reference images)"
    study.dbpp = dbpp_columns(study.cfg, study.split, study.scored_generated)
    return "DB++ column: " + (study.dbpp.reason or f"{study.dbpp.requests} requests this run, "
                              f"{study.dbpp.info.get('failed_pairs', 0)} pairs failed (asked again by the next run)")


def oracle_results(study: FPRStudy) -> pd.DataFrame | None:
    """Stage "oracle" (FPR Table 1): the references as queries, with the DB++ column where there is
    one, written as ``11_fpr_oracle`` (its sidecar says what the DB++ column holds); None when the
    run has no references (the table's skip is recorded)."""
    study.oracle = study.scores.oracle
    if study.have_refs:
        if study.dbpp is not None:
            study.oracle = with_oracle_dbpp(study.oracle, study.dbpp)
        study.run.write_table(study.oracle, "11_fpr_oracle", **study.dbpp_sidecar())
    return study.oracle


def main_results(study: FPRStudy) -> pd.DataFrame | None:
    """Stage "main comparison" (FPR Figure 3, Tables 5-13): methods x encoders, written as
    ``11_fpr_generated_long`` (with ``per_query.csv`` in the run's results) beside the mAP
    agreement with the true drift (``11_fpr_drift_agreement``); returns the comparison's shown
    columns, None when the run scores no generated images."""
    if not study.have_gen:
        return None
    main = study.scores.main
    study.run.write_table(main, "11_fpr_generated_long")
    write_csv(study.scores.per_query, study.run.results / "per_query.csv")
    agreement = study.scores.agreement_of("ap")
    study.run.write_table(agreement.drop(columns=["names", "rhos"], errors="ignore"), "11_fpr_drift_agreement")
    return main[[c for c in MAIN_COLUMNS if c in main.columns]]


def chance_results(study: FPRStudy) -> pd.DataFrame:
    """Stage "chance": the general encoder at a fixed random init beside the pretrained one
    (:func:`~.tables.chance_table`), written as ``11_chance`` when the profile lists a
    ``"<encoder>@random"``; empty otherwise."""
    chance = chance_table(study.oracle, study.scores.agreement, study.cfg.retrieval.encoders)
    if len(chance):
        study.run.write_table(chance, "11_chance")
    return chance


def main_figures(study: FPRStudy) -> list:
    """FPR Figure 3 (``11_fpr_main``, :func:`~.figures.plot_main`) when the run scores generated
    images; an empty list otherwise."""
    if not study.have_gen:
        return []
    return [study.run.figure(plot_main(study.scores.main, study.profile), "11_fpr_main")]


def per_dataset_results(study: FPRStudy) -> pd.DataFrame | None:
    """Stage "per-dataset tables" (FPR Tables 5-13): one row per (dataset, method) in the paper's
    columns (:func:`~.tables.generated_table`, with the DB++ column where there is one), written
    as ``11_fpr_generated`` and, per paper dataset, ``11_fpr_<key>``; None when the run scores no
    generated images."""
    if not study.have_gen:
        return None
    wide = generated_table(dataset_view(study.scores.per_query, study.dataset))
    if study.dbpp is not None:
        wide = with_generated_dbpp(wide, study.dbpp)
    meta = study.dbpp_sidecar()
    study.run.write_table(wide, "11_fpr_generated", **meta)
    for table_name, rows in split_by_dataset(wide).items():
        study.run.write_table(rows, table_name, **meta)
    return wide


def agreement_results(study: FPRStudy) -> pd.DataFrame | None:
    """Per encoder, the mean per-identity Spearman rho of the methods' mAP with the negative true
    drift (with each identity's rho); None when the run scores no generated images."""
    return study.scores.agreement_of("ap") if study.have_gen else None


def gallery_ablation_results(study: FPRStudy) -> list:
    """Stage "gallery ablations" (FPR Figure 5): images per subject and subjects per gallery
    (:func:`~.authors_ablations.gallery_ablation`, the authors' rule on their pools where the
    profile has them), written as ``11_fpr_gallery_ablation`` (table and figure); returns
    ``[table, figure]``, or an empty list when the run scores no generated images."""
    if not study.have_gen:
        return []
    abl = gallery_ablation(study.models, study.split.train, study.split.gallery, study.generated, study.cfg,
                           study.cache, study.seed, pool=study.pool)
    study.run.write_table(abl, "11_fpr_gallery_ablation")
    fig = study.run.figure(plot_gallery_ablation(abl, study.profile), "11_fpr_gallery_ablation")
    return [abl, fig]


def sampling_results(study: FPRStudy) -> pd.DataFrame | None:
    """Stage "gallery sampling" (FPR Table 2, percent): random vs k-means vs curated galleries
    (:func:`~.authors_ablations.sampling_table`, k-means in :func:`~.experiments.sampling_encoder`'s
    space), written as ``11_fpr_gallery_sampling``; None when the run scores no generated images."""
    if not study.have_gen:
        return None
    embed_with = sampling_encoder(study.models, study.pool)
    sampling = sampling_table(study.models, study.split.train, study.split.gallery, study.generated, study.cfg,
                              study.cache, embed_with, sampling_size(study.cfg), study.seed, pool=study.pool)
    study.run.write_table(sampling, "11_fpr_gallery_sampling")
    return sampling


def background_results(study: FPRStudy) -> list:
    """Stage "background removal" (FPR Figure 7, Table 14): the oracle with backgrounds kept and
    removed (:func:`~.ablations.background_ablation`; removed copies from
    :func:`~.experiments.background_removed` in the released data, the world's masks otherwise;
    prints why there are no removed rows where there are none), written as ``11_fpr_bg_removal``
    (table and figure); returns ``[table, figure]``, or an empty list when the run has no references."""
    if not study.have_refs:
        return []
    study.removed, study.removed_by, study.no_removal = background_removed(study.cfg, study.split)
    if study.no_removal:
        print("background-removed rows not produced:", study.no_removal)
    bg, study.bg_pq = background_ablation(study.models, study.split.train, study.split.gallery, study.cfg,
                                          study.cache, study.dataset, per_query=True, removed=study.removed)
    study.run.write_table(bg, "11_fpr_bg_removal", **background_note(study.split.train, study.split.gallery,
                                                                     study.removed_by, study.no_removal))
    return [bg, study.run.figure(plot_background(bg, study.profile), "11_fpr_bg_removal")]


def retrieval_list_figures(study: FPRStudy) -> list:
    """FPR Figure 4 (``11_fpr_retrieval_lists``): seeded identities' generated images with their
    reference and top-k gallery list (:func:`~.experiments.qualitative_cases`) in the NearID head's
    space (else the first encoder's); an empty list when the run scores no generated images."""
    if not study.have_gen:
        return []
    rc = study.cfg.retrieval
    show_enc = "nearid" if "nearid" in study.models else next(iter(study.models))
    cases = qualitative_cases(study.scores.extras[show_enc], study.scores.per_query, show_enc, list(LIST_METHODS),
                              rc.n_qualitative, rc.top_k, rc.group_by, study.seed)
    return [study.run.figure(plot_retrieval_lists(cases, study.profile), "11_fpr_retrieval_lists")]


def claims_results(study: FPRStudy) -> pd.DataFrame | None:
    """Stage "claims": :func:`~.claims.retrieval_claims` over the main comparison, the oracle and the
    background ablation, the specialised encoder's other training seeds scored for them
    (:func:`~.seeds.specialised_seed_runs` over :func:`~nearid_lib.models.published.published_seeds`;
    prints which seeds), written as ``claims_11_retrieval``; returns each claim's ``claim``,
    ``ours`` and ``verdict``, None when the run scores no generated images."""
    if not study.have_gen:
        return None
    nearid_spec = next((s for s in study.specs if s.name == "nearid"), None)
    seed_dirs = published_seeds(nearid_spec.kwargs["checkpoint"]) if nearid_spec is not None else {}
    seed_runs = (specialised_seed_runs(nearid_spec, seed_dirs, study.split, study.generated, study.cfg, study.cache,
                                       study.dataset, oracle=study.have_refs, background=study.have_refs,
                                       removed=study.removed) if seed_dirs else {})
    own_seed = next(iter(seed_dirs), study.seed)
    print("NearID head seeds in the claims:", [own_seed, *seed_runs])
    scores = study.scores
    claims = retrieval_claims(scores.main, scores.agreement_of("ap"), study.specs, study.profile, scores.per_query,
                              oracle_pq=scores.oracle_per_query, bg_pq=study.bg_pq,
                              rng=make_rng(study.seed, "claims", "11"), seed_runs=seed_runs, own_seed=own_seed)
    study.run.write_claims(claims, "11_retrieval")
    return claims[["claim", "ours", "verdict"]]
