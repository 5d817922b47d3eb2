"""NearID (Cvejic et al.): matched-context near-identity distractors, a MAP head trained on a frozen
backbone with the two-tier NearID loss, and the NearID-bench protocol (SSR/PA, MTG, DreamBench++).

Modules, in the order a run uses them:

- :mod:`.losses` (a package: the loss registry, the shared terms, one module per family of objectives):
  the NearID loss and every Table 3/4 variant
- :mod:`.distributed`: the global pool G across ranks
- :mod:`.rows`: training rows of an epoch; :mod:`.train_inputs`: augmentation and the features a step reads
- :mod:`.train`: the one training loop, ``train_group`` / ``train_head`` (and ``python -m nearid_lib.nearid.train``);
  :mod:`.group`: which heads share a batch stream; :mod:`.checkpoints`: resume state
- :mod:`.sweep`: ``train_and_score`` for the ablation notebooks (Tables 3, 6, 8, 9, 10)
- :mod:`.embedder`: embeddings of dataset images over cached backbone tokens
- :mod:`.evaluate`: SSR/PA per source, MTG, the source groups (Table 1's pool), one row per split, and
  the evaluation of one bench encoder over every benchmark
- :mod:`.scorers`: the bench encoders (embedding or pair scorers) of a profile; :mod:`.pairs`: the
  pairs each protocol scores; :mod:`.dbpp`: DreamBench++ metric-to-human (or the procedural stand-in)
- :mod:`.figures`: what the figures of notebook 08 show (KernelPCA panels, qualitative rows with scores)
- :mod:`.tables`: Tables 1, 2, 5, 7 and Figure 4 numbers; :mod:`.claims`: the claims of notebook 04
- :mod:`.bench_eval`: notebook 04 stage by stage (encoders, scoring, every table it writes or skips)

The VLM judge these bench encoders include is shared with ID-Sim and lives in the core:
:mod:`nearid_lib.judge`.
"""
