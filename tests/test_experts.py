"""Notebook 09 (many experts): top-k routing, the one-process MoE layer, and expert parallelism
checked exact (fp64 <= 1e-12) against it on 2 and 4 ranks, forward and backward.

One launch per world size (tests/experts_worker.py, module-scoped). On 2 ranks the worker also
runs two mutants of dltutor/experts/parallel.py (the combine puts rows back in the wrong order;
the dispatch's split sizes exchanged the wrong way) to show the comparison catches them."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dltutor.experts import gating, parallel
from dltutor.experts.layer import MoE
from dltutor.launch.run import launch

WORKER = Path(__file__).with_name("experts_worker.py")
TOL = 1e-12


@pytest.fixture(scope="module")
def two_ranks():
    return launch(WORKER, nproc=2, threads=1, echo=False, timeout=600).metrics


@pytest.fixture(scope="module")
def four_ranks():
    return launch(WORKER, nproc=4, threads=1, echo=False, timeout=600, oversubscribe=True).metrics


@pytest.fixture(params=["two_ranks", "four_ranks"])
def ranks(request):
    return request.getfixturevalue(request.param)


# ---------------------------------------------------------------- expert parallel vs one process
def test_expert_parallel_matches_one_process_forward_and_backward(ranks):
    for m in ranks:
        assert len(m["cases"]) == 9
        for c in m["cases"]:
            assert c["joined"], c
            for key in ("out_err", "dx_err", "gate_err", "expert_err"):
                assert c[key] <= TOL, (key, c)


def test_cases_cover_top_k_capacity_drops_and_an_empty_expert(ranks):
    world = ranks[0]["world_size"]
    cases = [c for m in ranks for c in m["cases"]]
    assert {(c["top_k"], c["cf"]) for c in cases} == {(1, None), (1, 1.0), (2, None), (2, 1.0)}
    assert all(c["dropped"] == 0 for c in cases if c["cf"] is None)
    assert any(c["dropped"] > 0 for c in cases if c["cf"] == 1.0 and c["top_k"] == 1)
    assert any(c["dropped"] > 0 for c in cases if c["cf"] == 1.0 and c["top_k"] == 2)
    for m in ranks:
        for c in m["cases"]:
            assert c["owned"] == list(range(2 * m["rank"], 2 * m["rank"] + 2))
            for e in c["empty"]:
                assert c["load"][e] == 0
                if e in c["owned"]:
                    assert all(row[e - c["owned"][0]] == 0 for row in c["counts_matrix"])
            assert sum(c["received"]) == sum(map(sum, c["counts_matrix"]))
    assert any(c["sent"] != c["received"] for c in cases), "uneven splits must be exercised"
    last = [c for c in ranks[-1]["cases"] if not c["x_grad"]][0]
    assert sum(last["received"]) == 0 and world == len(last["received"])  # a rank with no row


def test_counts_exchange_and_traffic_agree_across_ranks(ranks):
    world, per = ranks[0]["world_size"], 2
    for i in range(len(ranks[0]["cases"])):
        case = [m["cases"][i] for m in ranks]          # the same case on every rank
        for dst in range(world):
            for src in range(world):
                assert case[src]["sent"][dst] == case[dst]["received"][src]
                assert case[dst]["counts_matrix"][src] == \
                    case[src]["kept_load"][dst * per:(dst + 1) * per]
        for rank, c in enumerate(case):
            s = c["stats"]
            assert s["tokens_sent"] == sum(c["sent"]) - c["sent"][rank]
            assert s["tokens_received"] == sum(c["received"]) - c["received"][rank]
            assert s["tokens_local"] == c["sent"][rank] and s["expert_rows"] == sum(c["received"])
            assert s["bytes_sent"] == (s["tokens_sent"] + s["tokens_received"]) * 6 * 8  # d=6, fp64


def test_a_rank_without_rows_or_input_grad_still_joins_the_backward(ranks):
    for m in ranks:
        c = [c for c in m["cases"] if not c["x_grad"]][0]
        assert c["joined"] and c["expert_err"] <= TOL and c["gate_err"] <= TOL, c


def test_wrong_combine_order_and_swapped_splits_are_caught(two_ranks):
    for m in two_ranks:
        got = {x["name"]: x for x in m["mutants"]}
        assert got["combine_order"]["raised"] == "" and got["combine_order"]["out_err"] > 1e-3
        bad = got["splits_swapped"]
        assert bad["raised"] or bad["out_err"] > 1e-3, bad


# ---------------------------------------------------------------- routing, one process
def probs_as_logits(rows):
    return torch.tensor(rows, dtype=torch.float64).log()


def test_capacity_is_megatrons_formula():
    assert gating.capacity(12, 4, 2, 1.0) == 6
    assert gating.capacity(10, 4, 2, 1.25) == math.ceil(10 * 2 * 1.25 / 4) == 7
    assert gating.capacity(7, 3, 1, 0.5) == 2
    assert gating.capacity(7, 3, 1, None) is None
    r = gating.route(torch.randn(10, 4), top_k=2, capacity_factor=1.25)
    assert r.capacity == 7 and int(r.kept_load.max()) <= 7


def test_top_k_weights_renormalized_over_the_chosen():
    r = gating.route(probs_as_logits([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]), top_k=2)
    assert r.experts.tolist() == [[0, 1], [2, 1]]
    assert torch.allclose(r.weights, torch.tensor([[0.625, 0.375], [0.7 / 0.9, 0.2 / 0.9]],
                                                  dtype=torch.float64))
    assert r.kept.all() and r.dropped_fraction == 0 and r.load.tolist() == [1, 2, 1]


def test_drops_are_first_come_first_served_in_token_order():
    # capacity = ceil(2 tokens * 2 * 0.75 / 3) = 1. Token 0 takes expert 0 and (second choice)
    # expert 1, so token 1 loses both slots, its first choice (expert 1) included.
    r = gating.route(probs_as_logits([[0.5, 0.3, 0.2], [0.3, 0.5, 0.2]]), 2, capacity_factor=0.75)
    assert r.capacity == 1
    assert r.kept.tolist() == [[True, True], [False, False]]
    assert r.load.tolist() == [2, 2, 0] and r.kept_load.tolist() == [1, 1, 0]
    assert r.dropped_fraction == 0.5
    four = gating.route(probs_as_logits([[0.5, 0.3, 0.2]] * 4), 2, capacity_factor=0.5)
    assert four.capacity == 2 and four.kept.tolist() == [[True, True]] * 2 + [[False, False]] * 2


def test_aux_loss_on_a_hand_computed_case():
    # top-1: experts 0, 0, 1 -> f = (2/3, 1/3); P = (1.75/3, 1.25/3); 2 * sum f*P = 9.5/9
    r = gating.route(probs_as_logits([[0.75, 0.25], [0.75, 0.25], [0.25, 0.75]]), top_k=1)
    assert r.aux_loss.item() == pytest.approx(9.5 / 9, abs=1e-12)
    uniform = gating.route(torch.zeros(8, 4, requires_grad=True), top_k=2)
    assert uniform.aux_loss.item() == pytest.approx(1.0)
    uniform.aux_loss.backward()               # differentiable through the router probabilities


def test_route_errors_say_what_to_change():
    with pytest.raises(ValueError, match="top_k=5.*lower top_k"):
        gating.route(torch.randn(4, 4), top_k=5)
    with pytest.raises(ValueError, match="top_k=0"):
        gating.route(torch.randn(4, 4), top_k=0)
    for cf in (0, -1.0):
        with pytest.raises(ValueError, match="capacity_factor must be > 0"):
            gating.route(torch.randn(4, 4), top_k=1, capacity_factor=cf)
        with pytest.raises(ValueError, match="capacity_factor"):
            MoE(4, 8, 4, 2, capacity_factor=cf)
    with pytest.raises(ValueError, match="evenly"):
        parallel.experts_of(0, 4, 6)


# ---------------------------------------------------------------- the layer, one process
def test_moe_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = MoE(6, 10, 4, seed=7), MoE(6, 10, 4, seed=7), MoE(6, 10, 4, seed=8)
    assert torch.equal(torch.random.get_rng_state(), before)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert not torch.equal(a.gate.weight, c.gate.weight)


def test_moe_output_is_the_weighted_sum_and_a_fully_dropped_token_gets_zero():
    moe = MoE(5, 7, 3, top_k=2, capacity_factor=0.5, seed=1).double()
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.logit_bias.copy_(torch.tensor([2.0, 1.0, 0.0]))   # every token: experts 0 then 1
    x = torch.randn(4, 5, dtype=torch.float64)
    y = moe(x)
    r = moe.last_routing
    assert r.capacity == 2 and r.kept.tolist() == [[True, True]] * 2 + [[False, False]] * 2
    w = r.weights[0]
    want = w[0] * moe.experts[0](x[:2]) + w[1] * moe.experts[1](x[:2])
    assert torch.allclose(y[:2], want, atol=1e-14) and torch.equal(y[2:], torch.zeros(2, 5).double())


def test_groups_route_separately_and_change_nothing_without_capacity():
    x = torch.randn(8, 6, dtype=torch.float64)
    free = MoE(6, 10, 4, 2, None, seed=2).double()
    assert torch.equal(free(x), free(x, groups=2))
    capped = MoE(6, 10, 4, 2, 1.0, seed=2).double()
    capped(x)
    assert capped.last_routing.capacity == 4          # ceil(8 tokens * 2 * 1.0 / 4 experts)
    capped(x, groups=2)
    r = capped.last_routing
    halves = [gating.route(capped.logits(part), 2, 1.0) for part in x.chunk(2)]
    assert r.capacity == 2 and torch.equal(r.kept, torch.cat([h.kept for h in halves]))
    assert r.load.tolist() == (halves[0].load + halves[1].load).tolist()
    with pytest.raises(ValueError, match="equal groups"):
        capped(x, groups=3)


def test_active_parameters_count_the_gate_and_top_k_experts():
    moe = MoE(6, 10, 8, top_k=2)
    per_expert = 6 * 10 + 10 + 10 * 6 + 6
    assert moe.active_parameters() == 6 * 8 + 2 * per_expert
    assert sum(p.numel() for p in moe.parameters()) == 6 * 8 + 8 * per_expert
