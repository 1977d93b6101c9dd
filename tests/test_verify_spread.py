"""advise's verdict: a fix is faster only when its gain beats the noise of both measurements."""
from __future__ import annotations

from profuse.fixes.verify import NOT_SIGNIFICANT, SLOWER, VERIFIED, spread_us, verdict


def test_spread_is_the_interquartile_range():
    assert spread_us([10.0, 11.0, 12.0, 13.0, 14.0]) == 2.0
    assert spread_us([5.0, 9.0]) == 4.0
    assert spread_us([5.0]) == 0.0


def test_gain_inside_the_noise_is_not_significant():
    before = [100.0, 130.0, 90.0, 120.0, 110.0]   # median 110, IQR 20
    after = [95.0, 125.0, 105.0, 100.0, 115.0]    # median 105: a 5 µs "gain" inside the noise
    gain, v = verdict(before, after)
    assert gain == 5.0 and v == NOT_SIGNIFICANT


def test_clear_gain_is_verified_and_clear_loss_is_slower():
    before = [100.0, 101.0, 99.0, 100.5, 100.2]
    after = [60.0, 61.0, 59.0, 60.5, 60.2]
    assert verdict(before, after) == (40.0, VERIFIED)
    assert verdict(after, before) == (-40.0, SLOWER)


def test_no_samples_claims_nothing():
    assert verdict([], [1.0]) == (0.0, NOT_SIGNIFICANT)
