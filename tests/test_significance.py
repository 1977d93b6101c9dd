"""The exact Mann-Whitney test against a brute-force count over every split of the pooled values."""
from __future__ import annotations

import itertools
import random

import pytest

from profuse.analysis.compare.significance import cannot_tell, compare, min_steps, p_greater, p_two_sided


def brute_greater(a: list[float], b: list[float]) -> tuple[float, float]:
    """P(B's rank sum >= observed), P(<= observed) over every way to pick len(b) of the pooled values,
    ranks computed by counting (ties: the mean of the ranks they span)."""
    pooled = a + b

    def rank(v: float) -> float:
        below = sum(1 for x in pooled if x < v)
        same = sum(1 for x in pooled if x == v)
        return below + (same + 1) / 2

    ranks = [rank(v) for v in pooled]
    w = sum(ranks[len(a):])
    sums = [sum(ranks[i] for i in c) for c in itertools.combinations(range(len(pooled)), len(b))]
    return (sum(s >= w - 1e-9 for s in sums) / len(sums), sum(s <= w + 1e-9 for s in sums) / len(sums))


@pytest.mark.parametrize("seed", range(12))
def test_exact_p_values_equal_a_brute_force_count(seed):
    rng = random.Random(seed)
    n, m = rng.randint(1, 7), rng.randint(1, 7)
    # integer values: plenty of ties, as µs timestamps give
    a = [float(rng.randint(0, 6)) for _ in range(n)]
    b = [float(rng.randint(1, 8)) for _ in range(m)]
    assert p_greater(a, b) == pytest.approx(brute_greater(a, b), abs=1e-12)


def test_the_normal_approximation_above_the_exact_range_agrees_with_exact_nearby():
    rng = random.Random(7)
    a = [rng.gauss(100, 10) for _ in range(30)]
    b = [rng.gauss(108, 10) for _ in range(31)]       # 61 values: the approximation
    exact = p_greater(a[:29], b[:31])                  # 60: exact
    approx = p_greater(a, b)
    assert approx[0] == pytest.approx(exact[0], rel=0.6, abs=0.01)


def test_six_steps_a_side_call_a_1_9x_slowdown_and_one_step_cannot_tell():
    rng = random.Random(3)
    a = [1000 * (1 + rng.uniform(-0.15, 0.15)) for _ in range(6)]
    b = [1900 * (1 + rng.uniform(-0.15, 0.15)) for _ in range(6)]
    v = compare("step", a, b, threshold_pct=5)
    assert v.verdict == "slower" and v.fails and v.p_value == round(2 / 924, 6)  # records carry 6 places
    assert compare("step", b, a).verdict == "faster"
    one = compare("step", a[:1], b[:1], threshold_pct=5)
    assert one.verdict == "cannot tell" and not one.fails and one.p_value is None
    assert min_steps() == 4 and cannot_tell(3, 3) and not cannot_tell(4, 4)


def test_the_gate_needs_the_slowdown_beyond_the_threshold():
    a = [100.0, 101, 99, 100.5, 99.5, 100.2, 100.1, 99.9]
    b = [x * 1.03 for x in a]                          # significantly slower, but by 3% only
    v = compare("step", a, b, threshold_pct=5)
    assert v.verdict == "slower" and not v.fails
    assert p_two_sided(a, a) == 1.0
