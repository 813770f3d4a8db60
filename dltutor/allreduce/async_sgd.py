"""Asynchronous SGD's stale gradients, simulated in one process on real Fashion-MNIST.

In asynchronous SGD (a parameter server that applies each worker's gradient as it arrives) a
gradient is computed on parameters that are already `tau` updates old when it is applied:

    theta_{t+1} = theta_t - lr * grad(theta_{t - tau}; batch_t)        (tau = 0: plain SGD)

`simulate` does exactly this with a queue of the last tau+1 parameter snapshots (the delay model of
the literature's analyses of async SGD): same batches, same LR, same number of updates for every
tau, so staleness is the only difference. It is a SIMULATION in one process, not a timing of real
workers: every printout and title says "simulated staleness (one process)".

- `load(n_train, n_test)`       Fashion-MNIST (`dltutor.data.fashion_mnist`) as 784-feature rows,
                                else the SYNTHETIC stand-in, with the label to print
- `simulate(grad_fn, theta0, batches, lr, tau, evaluate, every)`  the delayed-update loop
- `run(taus, seeds, ...)`       an MLP trained for each tau and seed: curves of test accuracy/loss
- `final_rows(result)`          per tau: final test accuracy, its gap to tau = 0 paired by seed, loss
- `findings(rows)`              sentences from those numbers (`dltutor.core.findings`)
- `plot(result)`                test accuracy vs updates, one line per tau
"""
from __future__ import annotations

import collections
import math

import torch
import torch.nn.functional as nnf

from dltutor.core import findings as F

SIMULATED = "simulated staleness (one process)"


def load(n_train: int, n_test: int, seed: int = 0):
    """(x_train, y_train, x_test, y_test, data label): 28x28 grey images as 784 floats in [0, 1]."""
    from dltutor.core import env
    from dltutor.data import fashion_mnist, synthetic
    sets = fashion_mnist.load(env.data_dir())
    label = fashion_mnist.FASHION
    if sets is None:   # no Fashion-MNIST anywhere: the labelled stand-in
        sets = (synthetic.SyntheticCIFAR10(n_train, seed=seed),
                synthetic.SyntheticCIFAR10(n_test, seed=seed + 1))
        label = "SYNTHETIC data"
    g = torch.Generator().manual_seed(seed)
    out = []
    for ds, n in zip(sets, (n_train, n_test)):
        idx = torch.randperm(len(ds), generator=g)[:n]
        x = torch.from_numpy(ds.data[idx.numpy(), 2:30, 2:30, 0].reshape(len(idx), -1).copy())
        out += [x.float() / 255.0, torch.as_tensor(ds.targets)[idx]]
    return (*out, label)


def simulate(grad_fn, theta0, batches, lr: float, tau: int, evaluate=None, every: int = 0) -> tuple:
    """Apply, at update t, the gradient of batch t computed at theta_{max(0, t - tau)}.

    theta0: a list of tensors (not changed). Returns (final theta, [(t, *evaluate(theta_t))] every
    `every` updates and at the end). tau = 0 is plain SGD, bit for bit."""
    theta = [p.detach().clone() for p in theta0]
    history = collections.deque([theta], maxlen=tau + 1)   # theta_{t - tau} .. theta_t
    log = [(0, *evaluate(theta))] if evaluate else []
    t = 0
    for t, batch in enumerate(batches, start=1):
        grads = grad_fn(history[0], batch)                   # the oldest snapshot kept: stale
        theta = [p - lr * g for p, g in zip(theta, grads)]   # applied to the newest parameters
        history.append(theta)
        if evaluate and every and t % every == 0:
            log.append((t, *evaluate(theta)))
    if evaluate and (not log or log[-1][0] != t):
        log.append((t, *evaluate(theta)))
    return theta, log


def mlp_init(hidden: int, seed: int, features: int = 784, classes: int = 10) -> list:
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, hidden, generator=g) / math.sqrt(features)
    w2 = torch.randn(hidden, classes, generator=g) / math.sqrt(hidden)
    return [w1, torch.zeros(hidden), w2, torch.zeros(classes)]


def mlp_numel(hidden: int, features: int = 784, classes: int = 10) -> int:
    """Parameters of the MLP (its gradient's length): 784·H + H + H·10 + 10."""
    return features * hidden + hidden + hidden * classes + classes


def mlp_logits(theta, x):
    w1, b1, w2, b2 = theta
    return torch.relu(x @ w1 + b1) @ w2 + b2


def mlp_grad(theta, batch):
    x, y = batch
    params = [p.detach().requires_grad_(True) for p in theta]
    return torch.autograd.grad(nnf.cross_entropy(mlp_logits(params, x), y), params)


def batch_stream(x, y, batch: int, updates: int, seed: int):
    """`updates` mini-batches drawn in epochs of a fixed random order (the same for every tau)."""
    g = torch.Generator().manual_seed(seed)
    order = torch.empty(0, dtype=torch.long)
    for _ in range(updates):
        if len(order) < batch:
            order = torch.cat([order, torch.randperm(len(x), generator=g)])
        idx, order = order[:batch], order[batch:]
        yield x[idx], y[idx]


def run(taus=(0, 2, 8, 32), seeds=(0, 1), updates: int = 300, lr: float = 0.2, batch: int = 32,
        hidden: int = 64, n_train: int = 4000, n_test: int = 1000, every: int = 25) -> dict:
    """Train the MLP with each tau and seed on the same data; curves with the run's settings."""
    x, y, xt, yt, data = load(n_train, n_test)

    def evaluate(theta):
        with torch.no_grad():
            logits = mlp_logits(theta, xt)
            return (logits.argmax(1) == yt).float().mean().item(), nnf.cross_entropy(logits, yt).item()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny matrices: one thread is faster, and fair to the other ranks
    try:
        curves = _train_all(taus, seeds, x, y, batch, updates, lr, hidden, evaluate, every)
    finally:
        torch.set_num_threads(threads)
    return {"curves": curves, "data": data, "n_test": len(yt), "lr": lr, "batch": batch,
            "updates": updates, "hidden": hidden, "seeds": list(seeds), "n_train": len(y)}


def _train_all(taus, seeds, x, y, batch, updates, lr, hidden, evaluate, every) -> list[dict]:
    curves = []
    for seed in seeds:
        for tau in taus:
            _, log = simulate(mlp_grad, mlp_init(hidden, seed), batch_stream(x, y, batch, updates, seed),
                              lr, tau, evaluate, every)
            curves.append({"tau": tau, "seed": seed, "updates": [r[0] for r in log],
                           "test_acc": [r[1] for r in log], "test_loss": [r[2] for r in log]})
    return curves



def final_rows(result: dict) -> list[dict]:
    """Per tau: final test accuracy and loss (mean over seeds) and the gap to tau = 0 PAIRED by
    seed (every tau of a seed shares its initial weights, its batches and the one test set): the
    mean of the per-seed gaps and its 95 % confidence interval (`dltutor.core.spread`). The test
    set's own sampling width is common to both sides of a gap and is not added. One seed: nan."""
    from dltutor.core.spread import mean_and_ci
    final = {(c["tau"], c["seed"]): (c["test_acc"][-1], c["test_loss"][-1]) for c in result["curves"]}
    seeds = sorted({s for _, s in final})
    out = []
    for tau in sorted({t for t, _ in final}):
        accs = [final[(tau, s)][0] for s in seeds]
        gaps = [final[(tau, s)][0] - final[(0, s)][0] for s in seeds] if (0, seeds[0]) in final else []
        gap, ci = mean_and_ci(gaps) if len(gaps) > 1 else ((gaps[0], math.nan) if gaps else (math.nan, math.nan))
        out.append({"tau": tau, "test_acc": sum(accs) / len(accs), "accs": accs,
                    "gap": gap, "gap_ci": ci,
                    "test_loss": sum(final[(tau, s)][1] for s in seeds) / len(seeds), "seeds": len(accs)})
    return out


def table(rows: list[dict]):
    """`final_rows` as a table (HTML in Jupyter, aligned text under print)."""
    from dltutor.allreduce.sweep import no_interval_blank
    from dltutor.core.tables import Table
    shown = [{**r, "gap": 100 * r["gap"], "gap_ci": 100 * r["gap_ci"]} for r in rows]
    return Table(no_interval_blank(shown), ["tau", "test_acc", "gap", "gap_ci", "test_loss", "seeds"],
                 digits={"test_acc": 3, "gap": 2, "gap_ci": 2},
                 missing="n/a",
                 headers={"test_acc": "final test accuracy (mean of seeds)", "gap": "vs tau=0, points (paired by seed)",
                          "gap_ci": "± (95 % CI of the paired gap)", "test_loss": "test loss"})


def _paired(rows: list[dict], a: dict, b: dict) -> tuple[float, float]:
    """(mean, 95 % CI) over seeds of b's accuracy minus a's, paired by seed (points)."""
    from dltutor.core.spread import mean_and_ci
    gaps = [100 * (y - x) for x, y in zip(a["accs"], b["accs"])]
    return mean_and_ci(gaps) if len(gaps) > 1 else (gaps[0], math.nan)


def _gap_text(gap: float, ci: float, seeds: int) -> str:
    if seeds < 2:
        return f"{F.INCONCLUSIVE} ({abs(gap):.1f} points apart; one seed gives no interval)"
    if not F.differs(gap, 0.0, ci, 0.0):
        return f"{F.INCONCLUSIVE} ({gap:+.1f} points, ±{F.fmt(ci)} paired over {seeds} seeds)"
    return f"{abs(gap):.1f} points {'below' if gap < 0 else 'above'} (±{F.fmt(ci)}, paired over {seeds} seeds)"


def findings(rows: list[dict]) -> list[str]:
    """Sentences about final test accuracy per tau against sync (tau = 0) and from one tau to the
    next, each a gap paired by seed, from `final_rows`."""
    sync = next(r for r in rows if r["tau"] == 0)
    seeds = rows[0]["seeds"]
    out = [f"{SIMULATED}, {seeds} seed{'s' if seeds > 1 else ''}; every tau of a seed shares its weights, "
           "batches and test set, so each gap is paired by seed: the mean of the per-seed gaps ± its 95 % "
           "confidence interval (one seed gives no interval)."]
    for r in rows:
        if r["tau"] == 0:
            continue
        gap, ci = _paired(rows, sync, r)
        out.append(f"tau={r['tau']}: test accuracy {r['test_acc']:.1%} vs sync {sync['test_acc']:.1%}: "
                   + _gap_text(gap, ci, seeds).replace("points below", "points below sync")
                   .replace("points above", "points above sync") + ".")
    steps = []
    for a, b in zip(rows, rows[1:]):
        gap, ci = _paired(rows, a, b)
        steps.append(f"tau {a['tau']} -> {b['tau']}: " + _gap_text(gap, ci, seeds)
                     .replace("points below", "points lower").replace("points above", "points higher"))
    out.append("final test accuracy, step by step: " + "; ".join(steps) + ".")
    return out


def plot(result: dict, path=None):
    """Test accuracy vs updates, one line per tau (mean over seeds)."""
    import matplotlib.pyplot as plt
    from dltutor.core.env import fast_mode
    from dltutor.core.plots import finish
    where = f"[{result['data']}, one process on 1 CPU thread, no process group{', fast mode' if fast_mode() else ''}]"
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for tau in sorted({c["tau"] for c in result["curves"]}):
        mine = [c for c in result["curves"] if c["tau"] == tau]
        mean = [sum(v) / len(v) for v in zip(*(c["test_acc"] for c in mine))]
        ax.plot(mine[0]["updates"], [100 * m for m in mean], marker=".", label=f"tau = {tau}"
                + (" (sync)" if tau == 0 else ""))
    ax.set_xlabel(f"updates (batch {result['batch']}, lr {result['lr']})")
    ax.set_ylabel(f"test accuracy, % (mean of {len(result['seeds'])} seed(s))")
    ax.set_title(f"Async SGD, {SIMULATED}: accuracy vs updates {where}", fontsize=9)
    return finish(fig, ax, path)
