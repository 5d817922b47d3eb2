"""Prompts the judge is run with besides its own NearID rubric (:mod:`.model`).

:data:`IDSIM_JUDGE_PROMPT`: ID-Sim's standardised identity prompt (Supp. D.3, Fig. 21): a binary
``same_instance``, a ``confidence`` and a 0-1 ``similarity``, the field that ranks pairs
(:mod:`nearid_lib.idsim.mllm` reads it; ``python -m nearid_lib.judge --prompt idsim`` runs it).
"""
from __future__ import annotations

__all__ = ["IDSIM_JUDGE_PROMPT"]

IDSIM_JUDGE_PROMPT = """You are an identity metric for images. Look at the two images and decide whether they show the same instance: the same individual animal or the very same physical object, not just the same kind of thing.

Judge only stable, instance-specific evidence on the subject. Changes of pose, background and lighting are not evidence either way.

Reply with one JSON object and nothing else:
{"same_instance": 0 or 1, "confidence": <number between 0 and 1>, "similarity": <number between 0 and 1, higher = more likely the same instance>}"""
