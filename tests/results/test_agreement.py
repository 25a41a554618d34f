"""Two runs' agreement within their intervals: z per case, chi-square over the cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dstbench.results.agreement import agreement, log_se, log_z


def _measured(rng: np.random.Generator, truth: float, se: float, claimed_se: float) -> tuple[float, float, float]:
    value = truth * math.exp(rng.normal(0, se))
    return value, value * math.exp(-1.959964 * claimed_se), value * math.exp(1.959964 * claimed_se)


def test_log_se_inverts_a_log_symmetric_interval() -> None:
    assert log_se(2 * math.exp(-1.959964 * 0.1), 2 * math.exp(1.959964 * 0.1)) == pytest.approx(0.1)
    for low, high in ((math.nan, 2.0), (0.0, 2.0), (3.0, 2.0), (None, 1.0)):
        assert math.isnan(log_se(low, high))
    assert math.isnan(log_z((1.0, 0.9, 1.1), (math.nan, 0.9, 1.1)))
    assert math.isnan(log_z((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)))  # zero-wide intervals say nothing
    # 2.0 [1.8, 2.2] against 1.5 [1.4, 1.6]: log 2 - log 1.5 over the two se's combined.
    expected = math.log(2.0 / 1.5) / math.hypot(log_se(1.8, 2.2), log_se(1.4, 1.6))
    assert log_z((2.0, 1.8, 2.2), (1.5, 1.4, 1.6)) == pytest.approx(expected)


def test_intervals_that_hold_pass_and_intervals_half_as_wide_as_the_spread_fail() -> None:
    rng = np.random.default_rng(0)
    honest = [agreement(log_z(_measured(rng, 2.0, s, s), _measured(rng, 2.0, s, s)) for s in rng.uniform(0.02, 0.2, 12))
              for _ in range(400)]
    passed = sum(a.holds() is True for a in honest) / len(honest)
    assert 0.92 <= passed <= 0.98  # 95% nominal
    assert np.mean([a.sd for a in honest]) == pytest.approx(1.0, abs=0.06)
    narrow = [agreement(log_z(_measured(rng, 2.0, s, s / 2), _measured(rng, 2.0, s, s / 2)) for s in rng.uniform(0.02, 0.2, 12))
              for _ in range(200)]
    assert sum(a.holds() is False for a in narrow) / len(narrow) > 0.9
    assert np.mean([a.sd for a in narrow]) == pytest.approx(2.0, abs=0.15)
    wide = [agreement(log_z(_measured(rng, 2.0, s, 2 * s), _measured(rng, 2.0, s, 2 * s)) for s in rng.uniform(0.02, 0.2, 12))
            for _ in range(200)]
    assert all(a.holds() is True for a in wide) and sum(a.p_low <= 0.05 for a in wide) / len(wide) > 0.9
    assert "conservative" in wide[0].text() or wide[0].p_low > 0.05
    assert sum(a.p_low <= 0.05 for a in honest) / len(honest) < 0.08  # honest intervals rarely look too wide


def test_the_verdict_needs_enough_cases() -> None:
    few = agreement([0.5, -0.3, math.nan, 1.0])
    assert few.cases == 3 and few.holds() is None and "too few cases" in few.text()
    assert agreement([4.0, 3.5]).holds() is False  # a failure shows even on few cases
    assert agreement([]).cases == 0 and agreement([]).holds() is None
    many = agreement([0.3, -1.0, 0.8, -0.2, 1.1, 0.1, -0.6, 0.5])
    assert many.holds() is True and "8 cases: sum of z^2" in many.text() and "the intervals hold" in many.text()
    assert many.chi2 == pytest.approx(sum(v * v for v in [0.3, -1.0, 0.8, -0.2, 1.1, 0.1, -0.6, 0.5]))
