"""Dataset statistics (notebook 01's ``01_dataset_stats``): distractor images counted where they
exist, and what training reads counted apart (issue 53: 1,395 training views x 10 sources was
reported as 13,950 training distractors, where only the 4 training sources have train distractors)."""
from __future__ import annotations

from nearid_lib.data.overview import dataset_stats


def test_distractors_are_counted_where_they_exist_and_training_sources_apart(smoke_world):
    data = smoke_world
    stats = dataset_stats(data, n_diff_rows=2).set_index(["section", "name", "split"])["value"]
    unseen = [s for s in data.sources if s not in data.train_sources]
    assert unseen, "the smoke world needs a source outside training for this test"
    for split in ("train", "val", "test"):
        # slow and obvious: every (source, row, view) with an image path, in this split
        want = {src: sum(1 for _, r in data.distractors[src].iterrows() if r["split"] == split
                         for k in (1, 2, 3) if str(r.get(f"nimg{k}") or "") not in ("", "nan"))
                for src in data.sources}
        assert stats[("size", "distractor_images", split)] == sum(want.values())
        assert stats[("size", "distractor_images_training_sources", split)] == sum(want[s] for s in data.train_sources)
    views = stats[("size", "positive_images", "train")]
    train = stats[("size", "distractor_images", "train")]
    assert train == stats[("size", "distractor_images_training_sources", "train")] == views * len(data.train_sources)
    assert train < views * len(data.sources)          # the old count: every source in every split
