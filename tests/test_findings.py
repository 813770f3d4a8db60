"""The findings helpers say what the numbers say, each way, and 'inconclusive here' inside the spread."""
from dltutor.core import findings as f


def test_compare_each_way_and_inconclusive():
    assert "A is 1.50x B" in f.compare("A", 15.0, "B", 10.0, unit="img/s")
    assert "A is 0.50x B" in f.compare("A", 5.0, "B", 10.0)
    s = f.compare("A", 10.5, "B", 10.0, spread_a=0.4, spread_b=0.3)
    assert f.INCONCLUSIVE in s and "x B" not in s
    assert f.INCONCLUSIVE not in f.compare("A", 11.0, "B", 10.0, spread_a=0.4, spread_b=0.3)


def test_trend_directions():
    assert "falls as m grows" in f.trend("bubble", [1, 2, 4], [0.6, 0.4, 0.2], x_name="m")
    assert "rises as m grows" in f.trend("bubble", [1, 2, 4], [0.2, 0.4, 0.6], x_name="m")
    assert "up and down" in f.trend("bubble", [1, 2, 4], [0.2, 0.6, 0.4], x_name="m")
    flat = f.trend("bubble", [1, 2], [0.50, 0.52], x_name="m", spreads=[0.05, 0.05])
    assert f.INCONCLUSIVE in flat
    # each neighbour inside the spreads (gaps 0.0045 and 0.0038, ±0.0057 combined), the ends apart
    # (0.0083): steps that add up are a rise, not "flat" (a notebook 10 fast run said flat)
    creep = f.trend("async", [256, 1024, 2048], [0.0060, 0.0105, 0.0143], x_name="hidden",
                    spreads=[0.004, 0.004, 0.004])
    assert "rises as hidden grows" in creep and f.INCONCLUSIVE not in creep
    same = f.trend("async", [1, 2, 3], [0.010, 0.011, 0.012], x_name="m", spreads=[0.01] * 3)
    assert f.INCONCLUSIVE in same


def test_against_agrees_above_below():
    assert "agree" in f.against("x", 1.01, 1.0, tolerance=0.02, source="the formula")
    assert "above it by 0.5" in f.against("x", 1.5, 1.0, tolerance=0.02, source="the formula")
    assert "below it by 0.5" in f.against("x", 0.5, 1.0, tolerance=0.02, source="the formula")


def test_show_renders_markdown_and_text():
    out = f.show(["one", "two"], title="T")
    assert out._repr_markdown_().count("\n- ") == 2 and "this run's numbers" in out._repr_markdown_()
    assert str(out) == "T:\n- one\n- two"


def test_show_says_where_the_sentences_come_from():
    assert "(computed on paper)" in f.show(["x"], note="computed on paper")._repr_markdown_()
    assert "this run's numbers" not in f.show(["x"], note="computed on paper")._repr_markdown_()
