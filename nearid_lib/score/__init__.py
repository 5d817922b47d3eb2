"""Score your own encoder on all three papers' protocols with one call::

    import nearid_lib
    report = nearid_lib.score_encoder(my_embed_fn, profile="mini")   # list[PIL] -> array [N, D]
    report.table                      # your row beside the frozen baselines, the NearID head, the papers
    report.files["card"]              # a one-page Markdown report card with its figures

``encoder`` is a registered name (``nearid_lib.models.list_encoders()``), a Hugging Face / open_clip /
timm identifier (paper profile; :mod:`nearid_lib.models.user`) or any callable
``list[PIL.Image] -> array [N, D]``. The profile's data is built once or reused: of the procedural
world of ``smoke``/``mini`` only what the protocols read (the test split's identities, distractors
and MTG pairs, the edit grids and FPR galleries: ``build_world(cfg, splits=("test",))``, never
mistaken for the whole world), the released data of ``paper``; then every protocol runs:

* ``"nearid"``: NearID SSR/PA per distractor source, pooled over the main sources (Table 1) and
  foreground-only (Table 7), MTG M-O/M-Opair, the DB++ stand-in (:mod:`nearid_lib.nearid.evaluate`);
* ``"idsim"``: identity / background / viewpoint / lighting sensitivity on the edit grids with
  bootstrap 95% intervals over anchors (:mod:`nearid_lib.idsim.sensitivity`, ID-Sim Figure 6);
* ``"fpr"``: Finer-Personalization Rank on the galleries: gallery mAP beside pairwise similarity
  for the real references (FPR Table 1) and for simulated generators with known identity drift,
  with each metric's agreement with the true drift (:mod:`nearid_lib.fpr`).

Registered encoders go through the same feature caches as the notebooks (identical numbers). A
callable is embedded image by image (batched, with a progress bar) and its embeddings are cached
in chunks (a killed run resumes) under ``cache_dir(profile)/"score"``, keyed by its behavioural fingerprint
(:class:`~nearid_lib.models.UserEncoder`) and the dataset; ``cache=False`` turns that off.
The report card (:mod:`.card`) lands in ``out_dir`` (default
``build/<profile>/score/<encoder>``).
"""
from __future__ import annotations

from .card import ScoreReport
from .participants import PROTOCOLS, Participant
from .scoring import score_encoder

__all__ = ["score_encoder", "ScoreReport", "Participant", "PROTOCOLS"]

# Modules: :mod:`.scoring` (score_encoder: resolve, build the data, run, write), :mod:`.participants`
# (who is scored), :mod:`.protocols` (the three papers' runners over participants), :mod:`.card`
# (ScoreReport, the table and the Markdown report card).
