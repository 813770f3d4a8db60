"""dltutor.allreduce.param_server / async_sgd: a parameter server on real gloo ranks equals the ring's
average; the staleness simulation is plain SGD at tau = 0 and worse with delay; the findings
sentences follow the numbers each way."""
from __future__ import annotations

import math

import pytest
import torch

from dltutor.allreduce import async_sgd as A
from dltutor.allreduce import param_server as PS
from dltutor.core import findings as F
from dltutor.core import spread


# ---------------------------------------------------------------- parameter server on gloo
@pytest.mark.slow
def test_parameter_server_equals_ring_average_on_three_gloo_ranks():
    """1 server + 2 workers: the server's update and the ring's are both p0 - lr * mean(gradients)."""
    s = PS.measure(workers=[2], numel=1000, iters=1, warmup=0, passes=1, timeout=240)
    assert s["world_size"] == 3 and s["checks"] == {"2": True}
    grads = torch.stack([PS.worker_gradient(r, 7) for r in (1, 2)])
    want = PS.start_params(7) - PS.LR * grads.mean(0)
    for form in PS.FORMS:
        got = torch.tensor(s["check_params"]["2"][form], dtype=torch.float64)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), (form, got, want)
        assert s["check_params"]["2"][f"{form}_agree"]
    assert not torch.allclose(want, PS.start_params(7))           # the step did move the parameters
    assert {(r["form"], r["workers"]) for r in s["results"]} == {("ps", 2), ("ring", 2)}
    assert all(r["time_s"] > 0 for r in s["results"])
    table = PS.rows(s)
    assert [r["form"] for r in table] == ["ps", "ring"] and all(r["model_ms"] > 0 for r in table)


def test_rows_put_the_cost_model_beside_the_measurement():
    d, alpha, beta = 4000, 1e-4, 1e-9
    summary = {"alpha_s": alpha, "beta_s_per_byte": beta, "numel": d // 4, "world_size": 5,
               "results": [{"form": f, "workers": w, "time_s": 1e-3, "time_range_s": [1e-3, 3e-3],
                            "times_s": [1e-3, 3e-3, 2e-3]}
                           for w in (2, 4) for f in PS.FORMS]}
    by = {(r["form"], r["workers"]): r for r in PS.rows(summary)}
    for w in (2, 4):
        assert by[("ps", w)]["model_ms"] == pytest.approx(1e3 * 2 * w * (alpha + d * beta))
        ring = 2 * (w - 1) * alpha + 2 * (w - 1) / w * d * beta
        assert by[("ring", w)]["model_ms"] == pytest.approx(1e3 * ring)
        assert by[("ps", w)]["bytes_sent_by_busiest_rank"] == w * d       # the server: W·D out (and in)
        assert by[("ring", w)]["bytes_sent_by_busiest_rank"] == pytest.approx(2 * (w - 1) / w * d)
        assert by[("ps", w)]["measured_ms"] == pytest.approx(2.0)               # the mean of the passes
        assert by[("ps", w)]["spread_ms"] == pytest.approx(1e3 * spread.mean_ci([1e-3, 3e-3, 2e-3]))  # not half of 1..3
    text = PS.table(PS.rows(summary))
    assert "α-β model ms" in text and "16,000" in text      # the server's W·D at W = 4, D = 4000 B


def _table(ps, ring, spread=0.05):
    return [{"workers": w, "form": f, "measured_ms": y, "spread_ms": spread, "model_ms": m}
            for w, a, b, m in zip((2, 3, 4), ps, ring, (1.0, 1.5, 2.0))
            for f, y in (("ps", a), ("ring", b))]


def test_ps_findings_parameter_server_grows_faster():
    lines = PS.findings(_table(ps=[1.0, 2.0, 4.0], ring=[1.0, 1.1, 1.2]))
    assert "parameter server, time per step rises as W grows" in lines[0]
    assert "the parameter server's grew more" in lines[-1] and F.INCONCLUSIVE not in lines[-1]
    assert "grew by +3 ms (model: +1 ms)" in lines[-1] and "ring's by +0.2 ms" in lines[-1]
    assert "W=4: parameter server 4 ms vs ring 1.2 ms" in lines[3]


def test_ps_findings_ring_grows_faster():
    lines = PS.findings(_table(ps=[2.0, 2.1, 2.2], ring=[1.0, 2.0, 3.0]))
    assert "the ring's grew more" in lines[-1]
    assert "ring all-reduce (dist.all_reduce), time per step rises" in lines[1]


def test_ps_findings_give_the_ratio_beside_the_model_and_why_shared_cores_decide_nothing():
    """Issue #42 (05 c31/32): the model's PS/ring ratio beside the run's, and, when the ranks shared
    fewer cores than processes, that the run cannot test the model, with the cores it saw."""
    table = [{**r, "processes": 5, "cores": 2} for r in _table(ps=[2.0, 3.0, 2.8], ring=[1.0, 1.5, 2.0])]
    lines = PS.findings(table)
    assert ("parameter server / ring: measured 2.00x at W=2 and 1.40x at W=4; the α-β model "
            "(ping-pong fit) predicts 1.00x and 1.00x.") in lines
    assert lines[-1].startswith("This run cannot test how the model grows with W: at W=4 its 5 processes "
                                "(1 server + 4 workers) shared the 2 CPU core(s) the ranks saw")
    roomy = PS.findings([{**r, "processes": 5, "cores": 8} for r in table])
    assert not any("cannot test" in s for s in roomy) and len(roomy) == len(lines) - 1


def test_ps_findings_inconclusive_inside_the_spread():
    lines = PS.findings(_table(ps=[1.0, 1.05, 1.1], ring=[1.0, 1.02, 1.05], spread=0.5))
    assert F.INCONCLUSIVE in lines[-1] and "grew more" not in lines[-1]
    assert F.INCONCLUSIVE in lines[2] and F.INCONCLUSIVE in lines[3]      # each W: inside the spread


# ---------------------------------------------------------------- staleness, simulated
def _tiny_problem(seed=0, n=64, updates=12):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 784, generator=g), torch.randint(0, 10, (n,), generator=g)
    return list(A.batch_stream(x, y, 8, updates, seed))


def test_tau_zero_is_plain_sgd_bit_for_bit():
    batches, theta = _tiny_problem(), A.mlp_init(16, 3)
    ref = [p.clone() for p in theta]
    for b in batches:
        ref = [p - 0.1 * g for p, g in zip(ref, A.mlp_grad(ref, b))]
    got, _ = A.simulate(A.mlp_grad, theta, batches, 0.1, tau=0)
    assert all(torch.equal(a, b) for a, b in zip(got, ref))
    stale, _ = A.simulate(A.mlp_grad, theta, batches, 0.1, tau=3)
    assert not all(torch.equal(a, b) for a, b in zip(stale, ref))     # a delay changes the path
    assert all(torch.equal(a, b) for a, b in zip(theta, A.mlp_init(16, 3)))   # theta0 untouched


def test_tau_uses_the_gradient_of_parameters_tau_updates_old():
    """f(x) = x²/2, grad = x: with tau = 2, x_{t+1} = x_t - lr * x_{t-2} (x_{<0} = x_0)."""
    lr, xs = 0.5, [1.0]
    for t in range(6):
        xs.append(xs[-1] - lr * xs[max(0, t - 2)])
    _, log = A.simulate(lambda th, _b: [th[0]], [torch.tensor(1.0, dtype=torch.float64)], [None] * 6,
                        lr, tau=2, evaluate=lambda th: (th[0].item(),), every=1)
    assert [v for _, v in log] == pytest.approx(xs)


def test_more_staleness_is_worse_on_a_deterministic_quadratic():
    def loss_after(tau):
        th, _ = A.simulate(lambda th, _b: [3.0 * th[0]], [torch.ones(4)], [None] * 40, 0.1, tau)
        return float(1.5 * (th[0] ** 2).sum())
    losses = [loss_after(t) for t in (0, 2, 8)]
    assert losses[0] < losses[1] < losses[2], losses


def test_final_rows_spread_is_the_ci_over_seeds_with_the_sampling_width():
    curves = [{"tau": t, "seed": s, "updates": [0, 10], "test_acc": [0.1, a], "test_loss": [2.3, 1.0]}
              for t, s, a in ((0, 0, 0.80), (0, 1, 0.90), (4, 0, 0.50), (4, 1, 0.51))]
    rows = A.final_rows({"curves": curves, "n_test": 1000})
    assert rows[0]["test_acc"] == pytest.approx(0.85)
    assert rows[0]["spread"] == pytest.approx(spread.combined(spread.mean_ci([0.8, 0.9]),    # not half the range
                                                              F.accuracy_halfwidth(0.85, 1000)))
    assert rows[1]["spread"] == pytest.approx(spread.combined(spread.mean_ci([0.5, 0.51]),
                                                              F.accuracy_halfwidth(0.505, 1000)))
    one = A.final_rows({"curves": [c for c in curves if c["seed"] == 0], "n_test": 1000})
    assert all(math.isnan(r["spread"]) for r in one)                       # one seed: no interval
    assert F.INCONCLUSIVE in A.findings(one)[1] and "one seed gives no interval" in A.findings(one)[1]
    assert "final test accuracy" in A.table(rows) and "0.850" in A.table(rows)


def _rows(accs, spread=0.01):
    return [{"tau": t, "test_acc": a, "spread": spread, "test_loss": 1.0, "seeds": 1}
            for t, a in zip((0, 2, 8, 32), accs)]


def test_async_findings_sync_wins():
    lines = A.findings(_rows([0.80, 0.78, 0.70, 0.40]))
    assert A.SIMULATED in lines[0] and "1 seed;" in lines[0]
    assert "tau=32: test accuracy 40.0% vs sync 80.0%: 40.0 points below sync." == lines[3]
    assert "falls as tau grows" in lines[-1]


def test_async_findings_stale_wins():
    lines = A.findings(_rows([0.60, 0.65, 0.70, 0.75]))
    assert "15.0 points above sync" in lines[3] and "rises as tau grows" in lines[-1]


def test_async_findings_inconclusive_inside_the_spread():
    lines = A.findings(_rows([0.80, 0.79, 0.81, 0.795], spread=0.03))
    assert all(F.INCONCLUSIVE in s for s in lines[1:])
    assert not any("below sync" in s or "above sync" in s for s in lines)


def test_plots_carry_the_honest_labels():
    import matplotlib
    matplotlib.use("Agg")
    table = [{**r, "gradient_bytes": 4096, "processes": 5, "cores": 2}
             for r in _table(ps=[1.0, 2.0, 4.0], ring=[1.0, 1.1, 1.2])]
    title = PS.plot(table).axes[0].get_title()
    assert "5 processes on 2 cores" in title and "CPU/gloo" in title
    curves = [{"tau": t, "seed": 0, "updates": [0, 10], "test_acc": [0.1, 0.5], "test_loss": [2.3, 1.0]}
              for t in (0, 8)]
    title = A.plot({"curves": curves, "data": "Fashion-MNIST", "batch": 8, "lr": 0.1,
                    "seeds": [0]}).axes[0].get_title()
    assert A.SIMULATED in title and "Fashion-MNIST" in title
    # one process trains it: no ranks, no backend (issue #42: it was labelled "[CPU/gloo]")
    assert "one process on 1 CPU thread, no process group" in title and "gloo" not in title


def test_load_gives_fashion_mnist_as_784_features():
    x, y, xt, yt, label = A.load(50, 20)
    assert label == "Fashion-MNIST" and x.shape == (50, 784) and xt.shape == (20, 784)
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and float(x.max()) > 0.5
    assert set(y.tolist()) <= set(range(10)) and len(yt) == 20


def test_growth_with_w_combines_the_two_intervals_in_quadrature_not_by_sum():
    # growth 0.5 ms vs 0.2 ms; each growth's ± is two row intervals (±0.11) in quadrature (0.156);
    # summed (0.22 each) the gap 0.3 would fall inside them
    lines = PS.findings(_table(ps=[1.0, 1.2, 1.5], ring=[1.0, 1.1, 1.2], spread=0.11))
    assert "the parameter server's grew more" in lines[-1], lines[-1]


def test_one_pass_gives_no_interval_in_the_table():
    summary = {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9, "numel": 1000, "world_size": 3,
               "results": [{"form": f, "workers": 2, "time_s": 1e-3, "time_range_s": [1e-3, 1e-3],
                            "times_s": [1e-3]} for f in PS.FORMS]}
    rows = PS.rows(summary)
    assert all(math.isnan(r["spread_ms"]) for r in rows)
    assert F.INCONCLUSIVE in PS.findings(rows)[-1] and "no interval" in PS.findings(rows)[-1]
