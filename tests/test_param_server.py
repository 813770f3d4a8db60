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
        assert by[("ps", w)]["fastest_ms"] == pytest.approx(1.0)        # each statistic named
        assert by[("ps", w)]["median_ms"] == pytest.approx(2.0)
        assert by[("ps", w)]["slowest_ms"] == pytest.approx(3.0)
        assert by[("ps", w)]["times_ms"] == pytest.approx([1.0, 3.0, 2.0])   # pass order kept: pairs
    text = PS.table(PS.rows(summary))
    assert "α-β model ms" in text and "16,000" in text      # the server's W·D at W = 4, D = 4000 B
    assert "fastest of 3 passes" in text and "± (95 % CI)" not in text


LOAD = (1.0, 3.0, 1.5, 6.0, 1.2)   # how slow each pass was for everything (a shared machine)


def _table(ps, ring, noise=0.0):
    """Rows with 5 passes: each pass scales every time by LOAD; `noise` shuffles ring against ps."""
    out = []
    for w, a, b, m in zip((2, 3, 4), ps, ring, (1.0, 1.5, 2.0)):
        for f, y in (("ps", a), ("ring", b)):
            jitter = [1 + noise * (1 if (k + (f == "ring") + w // 2) % 2 else -1) for k in range(len(LOAD))]
            times = [y * l * j for l, j in zip(LOAD, jitter)]
            out.append({"workers": w, "form": f, "times_ms": times, "median_ms": sorted(times)[2],
                        "model_ms": m})
    return out


def test_ps_findings_parameter_server_grows_faster():
    lines = PS.findings(_table(ps=[1.0, 2.0, 4.0], ring=[1.0, 1.1, 1.2]))
    assert lines[0].startswith("parameter server, time per step from W=2 to W=4") and "rose x4.00" in lines[0]
    assert "the parameter server grew by the larger factor" in lines[-1] and F.INCONCLUSIVE not in lines[-1]
    assert "At W=4: parameter server is 3.33x ring" in lines[3]


def test_ps_findings_ring_grows_faster():
    lines = PS.findings(_table(ps=[2.0, 2.1, 2.2], ring=[1.0, 2.0, 3.0]))
    assert "the ring grew by the larger factor" in lines[-1]
    assert lines[1].startswith("ring all-reduce (dist.all_reduce), time per step from W=2 to W=4")
    assert "rose x3.00" in lines[1]


def test_ps_findings_give_the_ratio_beside_the_model_and_why_shared_cores_decide_nothing():
    """Issue #42 (05 c31/32): the model's PS/ring ratio beside the run's, and, when the ranks shared
    fewer cores than processes, that the run cannot test the model, naming every W of the launch."""
    table = [{**r, "processes": 5, "cores": 2} for r in _table(ps=[2.0, 3.0, 2.8], ring=[1.0, 1.5, 2.0])]
    lines = PS.findings(table)
    assert "At W=2: parameter server is 2.00x ring" in lines[2]
    assert "the α-β model (ping-pong fit) predicts 1.00x, the model's value lies below the measured interval" in lines[2]
    assert lines[-1].startswith("This run cannot test how the model grows with W: every W (2, 3, 4) ran "
                                "inside one launch of 5 processes")
    roomy = PS.findings([{**r, "processes": 5, "cores": 8} for r in table])
    assert not any("cannot test" in s for s in roomy) and len(roomy) == len(lines) - 1


def test_ps_findings_inconclusive_when_the_passes_disagree():
    """Issue #42 (05 c32): say WHICH difference is undecided: the growths' ratio, per pass."""
    lines = PS.findings(_table(ps=[1.0, 1.05, 1.1], ring=[1.0, 1.02, 1.05], noise=0.4))
    assert F.INCONCLUSIVE in lines[-1] and "which form grows faster is not decided" in lines[-1]
    assert F.INCONCLUSIVE in lines[2] and F.INCONCLUSIVE in lines[3]      # each W: the pairs disagree


def test_the_launchs_ping_pong_alpha_is_set_beside_the_two_rank_one():
    from dltutor.allreduce import ps_findings
    line = ps_findings.alpha_line({"alpha_s": 608e-6, "world_size": 5, "cores": 2}, 36.9e-6)
    assert "608 µs" in line and "5 processes on 2 core(s)" in line and "36.9 µs: 16.48x" in line
    # second read, item 12: α 1x alone hid a 1.6x difference in β
    line = ps_findings.alpha_line({"alpha_s": 50e-6, "beta_s_per_byte": 1 / 3.74e9, "world_size": 5,
                                   "cores": 2}, 49.1e-6, 1 / 2.37e9)
    assert "1/β = 3.74 GB/s against section 3's 2.37 GB/s: 1.58x" in line


def test_section_8a_says_how_disturbed_it_was_and_whether_its_fit_describes_its_points():
    from dltutor.allreduce import ps_findings
    res = [{"form": f, "workers": 2, "time_s": 1.0, "times_s": ts, "time_range_s": [min(ts), max(ts)]}
           for f, ts in (("ps", [1.0, 1.95, 1.0, 2.5]), ("ring", [1.0, 2.0, 1.1, 2.4]))]
    s = {"world_size": 3, "results": res, "alpha_s": 1e-4, "beta_s_per_byte": 1e-9}
    lines = ps_findings.fit_lines(s)
    assert "Passes 2, 4 of 4 were disturbed" in lines[0] and "did not record its ping-pong" in lines[1]
    s["pingpong"] = [{"bytes": 1000, "time_s": 3.3e-4}, {"bytes": 10**6, "time_s": 1.1e-3}]
    assert "up to 3.3x (at 1,000 bytes): beyond the 1.5x rule" in ps_findings.fit_lines(s)[1]
    s["pingpong"] = [{"bytes": 1000, "time_s": 1.0e-4}, {"bytes": 10**6, "time_s": 1.1e-3}]
    assert "within the 1.5x rule" in ps_findings.fit_lines(s)[1]


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


def _curves(accs_by_tau_seed):
    return [{"tau": t, "seed": sd, "updates": [0, 10], "test_acc": [0.1, a], "test_loss": [2.3, 1.0]}
            for (t, sd), a in accs_by_tau_seed.items()]


def test_final_rows_pair_the_gap_to_sync_by_seed():
    """Issue #42 (05 c35): every tau of a seed shares weights, batches and test set: the gap to
    tau = 0 is paired by seed, and the test set's sampling width is not added to it."""
    curves = _curves({(0, 0): 0.80, (0, 1): 0.90, (4, 0): 0.78, (4, 1): 0.88})
    rows = A.final_rows({"curves": curves, "n_test": 1000})
    assert rows[0]["test_acc"] == pytest.approx(0.85) and rows[1]["accs"] == pytest.approx([0.78, 0.88])
    assert rows[1]["gap"] == pytest.approx(-0.02) and rows[1]["gap_ci"] == pytest.approx(0.0, abs=1e-12)
    lines = A.findings(rows)
    # the seeds differ by 10 points, but each seed loses 2: decided when paired
    assert "tau=4: test accuracy 83.0% vs sync 85.0%: 2.0 points below sync" in lines[1]
    assert "tau 0 -> 4: 2.0 points lower" in lines[-1]
    one = A.final_rows({"curves": [c for c in curves if c["seed"] == 0], "n_test": 1000})
    assert math.isnan(one[1]["gap_ci"])                        # one seed: no interval
    assert F.INCONCLUSIVE in A.findings(one)[1] and "one seed gives no interval" in A.findings(one)[1]
    assert "final test accuracy" in A.table(rows) and "0.850" in A.table(rows)


def _rows(per_tau):
    """per_tau: one list of per-seed accuracies for each tau of (0, 2, 8, 32)."""
    curves = _curves({(t, sd): a for t, accs in zip((0, 2, 8, 32), per_tau) for sd, a in enumerate(accs)})
    return A.final_rows({"curves": curves, "n_test": 1000})


def test_async_findings_sync_wins():
    lines = A.findings(_rows([[0.80, 0.82, 0.81], [0.78, 0.80, 0.79], [0.70, 0.72, 0.71], [0.40, 0.42, 0.41]]))
    assert A.SIMULATED in lines[0] and "3 seeds;" in lines[0]
    assert lines[3].startswith("tau=32: test accuracy 41.0% vs sync 81.0%: 40.0 points below sync")
    assert "tau 8 -> 32: 30.0 points lower" in lines[-1]


def test_async_findings_stale_wins():
    lines = A.findings(_rows([[0.60, 0.62], [0.65, 0.67], [0.70, 0.72], [0.75, 0.77]]))
    assert "15.0 points above sync" in lines[3] and "tau 8 -> 32: 5.0 points higher" in lines[-1]


def test_async_findings_inconclusive_when_seeds_disagree():
    """A step where the seeds go opposite ways is undecided (the read's tau 0 -> 2)."""
    lines = A.findings(_rows([[0.80, 0.82, 0.81], [0.79, 0.83, 0.80], [0.82, 0.78, 0.81], [0.80, 0.81, 0.83]]))
    assert all(F.INCONCLUSIVE in s for s in lines[1:])
    assert not any("below sync" in s or "above sync" in s for s in lines)


def test_plots_carry_the_honest_labels():
    import matplotlib
    matplotlib.use("Agg")
    table = [{**r, "gradient_bytes": 4096, "processes": 5, "cores": 2, "fastest_ms": min(r["times_ms"]),
              "slowest_ms": max(r["times_ms"])} for r in _table(ps=[1.0, 2.0, 4.0], ring=[1.0, 1.1, 1.2])]
    fig = PS.plot(table)
    title = fig.axes[0].get_title()
    assert "5 processes on 2 cores" in title and "CPU/gloo" in title
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert any("median of passes; bar: fastest..slowest" in x for x in labels), labels
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


def test_one_pass_gives_no_interval_and_decides_nothing():
    summary = {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9, "numel": 1000, "world_size": 5,
               "results": [{"form": f, "workers": w, "time_s": t, "time_range_s": [t, t], "times_s": [t]}
                           for w in (2, 4) for f, t in (("ps", 2e-3 * w), ("ring", 1e-3))]}
    lines = PS.findings(PS.rows(summary))
    assert all(F.INCONCLUSIVE in x and "one pass gives no interval" in x for x in lines), lines
