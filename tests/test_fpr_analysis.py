"""Agreement of scores with the true drift, and their spread."""
from __future__ import annotations

import numpy as np
import pytest

from nearid_lib.fpr.analysis import drift_agreement, spread


def test_drift_agreement_and_spread():
    assert drift_agreement([0.9, 0.7, 0.5], [0.0, 0.3, 0.6]) == pytest.approx(1.0)
    assert drift_agreement([0.5, 0.7, 0.9], [0.0, 0.3, 0.6]) == pytest.approx(-1.0)
    assert np.isnan(drift_agreement([0.5, 0.5, 0.5], [0, 1, 2]))
    assert spread([0.8, 0.9, 1.0]) == pytest.approx(0.2 / 0.9)
