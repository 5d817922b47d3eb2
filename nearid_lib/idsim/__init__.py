"""ID-Sim: an identity metric (frozen backbone + LoRA + CLS/patch heads, CLS InfoNCE + Sinkhorn
patch InfoNCE), its benchmarks and the selective-sensitivity regression (ID-Sim Figure 6).

- :mod:`.model`: the model (frozen backbone + LoRA + CLS/patch heads, checkpoints), the ``idsim``
  encoder of :func:`nearid_lib.models.load_encoder`
- :mod:`.losses`: the ID-Sim losses
- :mod:`.sampling`: App. A.1 balanced instance sampling, context edits and augmentations
- :mod:`.triplets`: hard-negative mining and the S1 / S2a / S2b training triplets
- :mod:`.prefix`: the cache of frozen prefix features
- :mod:`.train`: ``train_idsim``
- :mod:`.eval_suite`: the mini evaluation sets of every benchmark kind of ID-Sim Figure 25;
  :mod:`.eval_files`: their released file layouts; :mod:`.public_eval`: Subjects2k and DreamBench++
- :mod:`.encoders`: ``idsim`` and ``idsim-release`` in the encoder registry (an entry point)
- :mod:`.sensitivity`: selective sensitivity with bootstrap confidence intervals (Figure 6)
- :mod:`.mllm`: MLLM judges of identity on the graded pairs (Table 2a)
- :mod:`.persam`: personalized segmentation with patch features, PerSAM-style (Table 2c)
- :mod:`.claims`: ID-Sim's claims declared, and their per-unit evidence
- :mod:`.experiment`: notebook 09's stages (train on the world or score the release), every
  table written or skipped with its reason
"""
