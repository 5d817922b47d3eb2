"""ID-Sim: an identity metric (frozen backbone + LoRA + CLS/patch heads, CLS InfoNCE + Sinkhorn
patch InfoNCE), its benchmarks and the selective-sensitivity regression (ID-Sim Figure 6).

- :mod:`.model`: the model (frozen backbone + LoRA + CLS/patch heads, checkpoints), the ``idsim``
  encoder of :func:`nearid_lib.models.load_encoder`
- :mod:`.losses`: the ID-Sim losses
- :mod:`.sampling`: App. A.1 balanced instance sampling, context edits and augmentations
- :mod:`.triplets`: hard-negative mining and the S1 / S2a / S2b training triplets
- :mod:`.prefix`: the cache of frozen prefix features
- :mod:`.train`: ``train_idsim``
- :mod:`.bench`: the mini benchmarks of every benchmark kind of ID-Sim Figure 25
- :mod:`.sensitivity`: selective sensitivity with bootstrap confidence intervals (Figure 6)
- :mod:`.mllm`: MLLM judges of identity on the graded pairs (Table 2a)
- :mod:`.persam`: personalized segmentation with patch features, PerSAM-style (Table 2c)
- :mod:`.claims`: ID-Sim's claims declared, and their per-unit evidence
"""
