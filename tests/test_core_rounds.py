"""dltutor.core.rounds: compared set-ups run in turns, the order rotated each round."""
from dltutor.core.rounds import in_turns, rotated, rotations


def test_each_round_rotates_the_order_so_no_set_up_is_always_first():
    order = rotations("abc", 4)
    assert order == [list("abc"), list("bca"), list("cab"), list("abc")]
    assert {o[0] for o in order[:3]} == set("abc")          # each set-up leads one round
    assert rotated([], 3) == []


def test_in_turns_runs_every_set_up_once_per_round_in_the_rotated_order():
    seen = []
    out = in_turns(["a", "b", "c"], 3, lambda k, r: seen.append((k, r)) or f"{k}{r}")
    assert seen == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1),
                    ("c", 2), ("a", 2), ("b", 2)]
    assert out == {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1", "c2"]}
