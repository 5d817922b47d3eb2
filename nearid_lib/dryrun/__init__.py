"""The paper profile's dry run: a fixture mirror of everything ``PROFILE=paper`` reads, in the
published layouts exactly, with tiny images and tiny random-init models of the paper's classes.

``python -m nearid_lib.dryrun HUB_DIR DOWNLOADS_DIR`` writes

- ``HUB_DIR/<org>/<name>``: every hub repository of the paper profile as ``huggingface-cli download
  --local-dir`` leaves it (datasets: ``data/*.parquet`` shards + ``README.md`` card in the authors'
  schema; models: ``save_pretrained`` folders under the paper's model ids), see :mod:`.nearid`;
- ``DOWNLOADS_DIR``: the hand-downloaded datasets in their publishers' layouts (FPR galleries and
  generated images, :mod:`.fpr`; DreamBench++ and ID-Sim benchmarks, :mod:`.idsim`).

``make dryrun-paper`` then runs every notebook with ``PROFILE=paper``, ``NEARID_HUB_DIR=HUB_DIR``,
``NEARID_DOWNLOADS=DOWNLOADS_DIR`` and the size-only overrides of :data:`SIZE_OVERRIDES` (sizes and
steps, never a code path).
"""
