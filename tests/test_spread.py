"""The course's "±" (dltutor.core.spread): a confidence interval of the mean, not the range of
steps; combined in quadrature; one value decides nothing."""
import math

import pytest
from scipy import stats

from dltutor.core import findings, spread


def test_the_interval_is_students_t_of_the_mean_and_shrinks_with_more_repeats():
    xs = [812.0, 790.0, 845.0, 801.0]
    lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=sum(xs) / 4, scale=stats.sem(xs))
    assert spread.mean_ci(xs) == pytest.approx((hi - lo) / 2)
    assert spread.mean_ci(xs * 4) < spread.mean_ci(xs) / 2      # the range of steps would not move
    assert findings.half_range(xs * 4) == findings.half_range(xs)
    assert math.isnan(spread.mean_ci([5.0])) and math.isnan(spread.mean_ci([]))


def test_warm_up_is_left_out_and_the_rate_mean_comes_with_its_interval():
    rates = [10.0, 50.0, 100.0, 102.0, 98.0, 101.0]
    mean, hw = spread.rate_ci(rates, warmup=2)
    assert mean == pytest.approx(100.25) and hw < 4
    assert spread.mean_and_ci([None, 3.0], warmup=0)[0] == 3.0


def test_two_values_differ_beyond_their_intervals_in_quadrature_and_never_without_one():
    assert spread.combined(3.0, 4.0) == 5.0
    assert findings.differs(10.0, 15.5, 3.0, 4.0) and not findings.differs(10.0, 14.9, 3.0, 4.0)
    assert not findings.differs(10.0, 1000.0, math.nan, 1.0)
    line = findings.compare("A", 10.0, "B", 1000.0, spread_a=math.nan, spread_b=1.0)
    assert "inconclusive here" in line and "one measurement" in line
    assert "±5 combined" in findings.compare("A", 10.0, "B", 14.0, spread_a=3.0, spread_b=4.0)
    assert findings.fmt(math.nan) == "n/a"


def test_the_note_says_what_the_sign_means():
    assert "95 % confidence interval of the mean" in spread.SPREAD_NOTE
    assert "not how much one step varies" in spread.SPREAD_NOTE


def test_bars_of_compared_rates_carry_their_intervals():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.core.plots import bar_compare
    rows = [{"variant": "a", "img_per_s": 100.0, "spread": 10.0},
            {"variant": "b", "img_per_s": 120.0, "spread": math.nan},
            {"variant": "c", "img_per_s": None, "status": "not timed"}]
    fig = bar_compare(rows, title="t")
    ax = fig.axes[0]
    assert "95 % CI" in ax.get_xlabel()
    caps = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert caps, "error bars drawn"
    segments = caps[0].lines[2][0].get_segments()
    widths = sorted(round(abs(s[1][0] - s[0][0]), 6) for s in segments)
    assert widths == [0.0, 0.0, 20.0]           # only the row with an interval gets one


def test_a_paired_ratio_interval_is_taken_on_the_logarithms():
    import math
    from dltutor.core.spread import ratio_ci
    mid, lo, hi = ratio_ci([1.62, 2.14, 1.75])              # notebook 03's Horovod / DDP per round
    assert math.isclose(mid, (1.62 * 2.14 * 1.75) ** (1 / 3))
    assert 1.2 < lo < mid < hi < 2.7 and math.isclose(mid / lo, hi / mid)   # symmetric in log
    assert math.isnan(ratio_ci([2.0])[1]) and math.isnan(ratio_ci([])[0])
