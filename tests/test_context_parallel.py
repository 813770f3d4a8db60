"""Notebook 09 / long sequences: ring attention and Ulysses against one-process attention.

The multi-process tests share one launch of tests/context_parallel_worker.py on 2 ranks and one on
4 ranks (module-scoped); the rest is one process: the merge, sharding and the formulas.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dltutor.context_parallel import attention as A
from dltutor.context_parallel import ring, sharding, ulysses
from dltutor.launch.run import launch

WORKER = Path(__file__).with_name("context_parallel_worker.py")
TOL = {"float64": 1e-12, "float32": 1e-5}


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def ranks(request):
    res = launch(WORKER, nproc=request.param, threads=1, echo=False, timeout=300, oversubscribe=True)
    assert [m["rank"] for m in res.metrics] == list(range(request.param))
    return res.metrics


def exact(check) -> bool:
    return all(err <= TOL[check["dtype"]] for err in check["errors"].values())


def checks(metrics, method):
    return [c for m in metrics for c in m["checks"] if c["method"] == method]


# ---------------------------------------------------------------- exact, on real ranks
def test_ring_is_exact_forward_and_backward(ranks):
    got = checks(ranks, "ring")
    assert {(c["layout"], c["causal"], c["dtype"]) for c in got} == {
        (layout, causal, dtype) for layout in sharding.LAYOUTS for causal in (False, True) for dtype in TOL}
    for c in got:
        assert set(c["errors"]) == {"out", "dq", "dk", "dv"} and exact(c), c


def test_ulysses_is_exact_forward_and_backward(ranks):
    got = checks(ranks, "ulysses")
    assert {(c["causal"], c["dtype"]) for c in got} == {(causal, d) for causal in (False, True) for d in TOL}
    for c in got:
        assert exact(c), c


def test_broken_merge_or_backward_misses_the_tolerance(ranks):
    """The same checks with the usual mistakes put in on purpose must fail them."""
    for m in ranks:
        names = {c["mutant"] for c in m["mutants"]}
        assert names == {"merge_not_rescaled", "dkv_not_sent_home"}
        for c in m["mutants"]:
            assert not exact(c), c
            if c["mutant"] == "merge_not_rescaled":
                assert c["errors"]["out"] > 1e-3  # the forward is wrong
            else:
                assert c["errors"]["out"] <= 1e-12 and min(c["errors"]["dk"], c["errors"]["dv"]) > 1e-3


def test_ring_over_a_subgroup_finds_its_peers(ranks):
    """4 ranks run two rings of 2 ([0, 1], [2, 3]); 2 ranks have no subgroup check."""
    for m in ranks:
        assert len(m["subgroups"]) == (1 if len(ranks) == 4 else 0)
        assert all(exact(c) for c in m["subgroups"]), m["subgroups"]


# ---------------------------------------------------------------- counted against the formulas
def test_counted_blocks_equal_the_formula(ranks):
    world = len(ranks)
    for m in ranks:
        for c in m["checks"]:
            if c["method"] == "ring":
                want = ring.blocks_formula(world, c["layout"], c["causal"], seq=c["seq"])[m["rank"]]
                assert c["stats"]["blocks"] == pytest.approx(want, abs=1e-12), c
                assert c["stats"]["blocks_computed"] >= c["stats"]["blocks"]


def test_counted_bytes_equal_the_formula(ranks):
    world = len(ranks)
    for m in ranks:
        for c in m["checks"]:
            module = ring if c["method"] == "ring" else ulysses
            want = module.bytes_formula(1, 4, c["seq"], 8, world, c["element_size"])
            assert (c["stats"]["bytes_sent_forward"], c["stats"]["bytes_sent_backward"]) == (
                want["forward"], want["backward"]), c
            assert c["stats"]["messages"] == c["stats"]["messages_forward"] + c["stats"]["messages_backward"] > 0


def test_fused_lse_trap_gives_right_forward_wrong_gradients(ranks):
    trap = ranks[0]["trap"]
    assert trap["forward_error_fused"] <= 1e-12 and trap["forward_error_course"] <= 1e-12
    assert trap["dq_error_fused"] > 1e-2 and not trap["lse_differentiable_fused"]
    assert trap["dq_error_course"] <= 1e-12 and trap["dk_error_course"] <= 1e-12


# ---------------------------------------------------------------- one process
def qkv(seq=16, heads=2, dim=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, seq, dim, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
def test_blocks_merged_in_any_order_equal_reference(causal):
    q, k, v = qkv()
    ref = A.reference(q, k, v, causal)
    pos = torch.arange(16)
    out, lse = A.empty_state(q)
    for cols in (slice(12, 16), slice(0, 4), slice(8, 12), slice(4, 8)):  # later keys first
        mask = A.causal_allowed(pos, pos[cols]) if causal else None
        out, lse = A.merge(out, lse, *A.block(q, k[:, :, cols], v[:, :, cols], mask))
    assert (out - ref).abs().max() <= 1e-12
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    want = torch.autograd.grad(ref.sum(), (q, k, v))
    assert max((a - b).abs().max().item() for a, b in zip(grads, want)) <= 1e-12


def test_rows_that_see_no_key_stay_zero_without_nan():
    q, k, v = qkv(seq=4)
    none = torch.zeros(4, 4, dtype=torch.bool)
    out, lse = A.block(q, k, v, none)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
    merged, merged_lse = A.merge(*A.empty_state(q), out, lse)
    assert torch.equal(merged, torch.zeros_like(merged)) and torch.isneginf(merged_lse).all()
    merged.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_merge_rescales_the_running_output():
    """A second block with larger scores must shrink the first block's share."""
    out_a, out_b = torch.ones(1, 1, 1, 2, dtype=torch.float64), torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    lse_a, lse_b = torch.zeros(1, 1, 1, dtype=torch.float64), torch.full((1, 1, 1), 3.0, dtype=torch.float64)
    out, lse = A.merge(out_a, lse_a, out_b, lse_b)
    share = 1 / (1 + torch.exp(torch.tensor(3.0, dtype=torch.float64)))
    assert out[0, 0, 0, 0].item() == pytest.approx(share.item(), abs=1e-15)
    assert lse.item() == pytest.approx(torch.logaddexp(lse_a, lse_b).item(), abs=1e-15)


@pytest.mark.parametrize("causal", [False, True])
def test_ring_on_one_process_is_attention(causal):
    q, k, v = qkv()
    stats = {}
    out = ring.ring_attention(q, k, v, causal=causal, stats=stats)
    assert (out - A.reference(q, k, v, causal)).abs().max() <= 1e-12
    assert stats["blocks"] == pytest.approx(ring.blocks_formula(1, "contiguous", causal, seq=16)[0])
    assert stats["bytes_sent_forward"] == 0


@pytest.mark.parametrize("layout", sharding.LAYOUTS)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shard_unshard_round_trip_and_positions(layout, world):
    seq = 24
    x = torch.arange(seq).view(1, 1, seq, 1)
    parts = [sharding.shard(x, r, world, layout) for r in range(world)]
    assert torch.equal(sharding.unshard(parts, layout), x)
    for r, part in enumerate(parts):
        assert torch.equal(part.flatten(), sharding.positions(seq, r, world, layout))
    assert sorted(torch.cat([p.flatten() for p in parts]).tolist()) == list(range(seq))


def test_zigzag_takes_one_chunk_from_each_end():
    assert sharding.positions(16, 0, 4, "zigzag").tolist() == [0, 1, 14, 15]
    assert sharding.positions(16, 3, 4, "zigzag").tolist() == [6, 7, 8, 9]


@pytest.mark.parametrize("args, words", [
    ((30, 4, "contiguous"), "multiple of 4"),
    ((12, 4, "zigzag"), "multiple of 8"),
    ((16, 4, "diagonal"), "not one of contiguous, zigzag"),
])
def test_bad_split_is_one_sentence(args, words):
    with pytest.raises(ValueError, match=words) as err:
        sharding.check(*args)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")
    with pytest.raises(ValueError):
        sharding.shard(torch.zeros(1, 1, args[0], 1), 0, args[1], args[2])


def test_ulysses_heads_not_divisible_is_refused():
    with pytest.raises(ValueError, match="6 heads are not divisible by 4 ranks"):
        ulysses.check(6, 4)
    ulysses.check(8, 4)


def test_ulysses_exchange_round_trip_on_one_process():
    x = torch.randn(2, 4, 8, 3)
    assert torch.equal(ulysses.heads_to_seq(ulysses.seq_to_heads(x)), x)


def test_formulas():
    assert ring.blocks_formula(2, "contiguous", True) == [0.5, 1.5]
    assert ring.blocks_formula(4, "zigzag", True) == [2.0] * 4
    assert ring.blocks_formula(2, "contiguous", True, seq=64) == [33 / 64, 1 + 33 / 64]
    assert ring.blocks_formula(3, "zigzag", False) == [3.0] * 3
    e = 1 * 4 * 16 * 8 * 8  # one K shard of b=1, h=4, S/P=16, d=8, fp64
    assert ring.bytes_formula(1, 4, 64, 8, 4, 8) == dict(forward=2 * e * 3, backward=4 * e * 3 + 2 * e)
    assert ulysses.bytes_formula(1, 4, 64, 8, 4, 8) == dict(forward=4 * e * 3 // 4, backward=4 * e * 3 // 4)
    nothing = dict(forward=0, backward=0)
    assert ring.bytes_formula(1, 4, 64, 8, 1, 8) == ulysses.bytes_formula(1, 4, 64, 8, 1, 8) == nothing
    with pytest.raises(ValueError, match="6 heads"):
        ulysses.bytes_formula(1, 6, 64, 8, 4, 8)


def test_causal_plan_skips_the_future_and_halves_zigzag_blocks():
    mine = sharding.positions(32, 0, 2, "zigzag")  # chunks 0 and 3
    theirs = sharding.positions(32, 1, 2, "zigzag")  # chunks 1 and 2
    p = ring.plan(mine, theirs, causal=True)
    assert p.rows.tolist() == list(range(8, 16)) and p.mask is None  # only chunk 3's queries
    assert ring.plan(sharding.positions(32, 0, 2, "contiguous"), sharding.positions(32, 1, 2, "contiguous"),
                     causal=True) is None
