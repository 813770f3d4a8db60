"""What a large-batch sweep (`dltutor.ddp.batch_study.sweep`) shows: tables, sentences, a command.

* `gap_rows(rows)`: per global batch, the test accuracy of each LR policy after the same epochs.
* `scaling_rows(rows)`: steps to the target accuracy per batch beside perfect scaling
  (steps x B_0 / B: doubling the batch halves the steps) and the efficiency ideal / measured.
* `describe(rows)`: the sentences a notebook prints, built from the measured numbers only (a test
  gap is told apart from under-training by the training accuracy, where the rows have it).
* `python -m dltutor.ddp.batch_report [--fast]`: the sweep of notebook 02 at its full (or fast)
  sizes, without Jupyter; it prints both tables and the sentences.
"""
from __future__ import annotations

import math

from dltutor.core import env
from dltutor.ddp.batch_study import POLICIES, POLICY_TEXT

# notebook 02's sizes for the study (its parameters cell holds the same values, full / fast)
# (full: three batches, so that warm-up can be run with 3 seeds on 2 cores; see warmup_seeds)
FULL = dict(train=8192, test=2000, epochs=4, batches=[64, 512, 1024], base_lr=0.005,
            warmup_epochs=1.0, world_size=2, max_epochs=8, seeds=(0, 1, 2))
FAST = dict(train=512, test=300, epochs=2, batches=[16, 64, 256], base_lr=0.005,
            warmup_epochs=1.0, world_size=2, max_epochs=2, seeds=(0,))
GOOD_EFFICIENCY = 0.8   # "still scales": doubling the batch saves at least 80% of the ideal steps


def gap_rows(rows: list[dict]) -> list[dict]:
    """One row per global batch: steps in the budget, the test accuracy and peak LR of each policy."""
    out = []
    for batch in sorted({r["global_batch"] for r in rows}):
        row = {"global_batch": batch}
        for r in (r for r in rows if r["global_batch"] == batch):
            row.update({"steps": r["steps"], r["policy"]: r["test_acc"], f"lr {r['policy']}": r["peak_lr"]})
        out.append(row)
    return out


def scaling_rows(rows: list[dict], policy: str = "scaled+warmup") -> list[dict]:
    """Steps to the target for `policy` per batch, beside perfect scaling from the smallest batch
    (steps x B_0 / B) and the efficiency ideal / measured (1.0 = doubling the batch halves the steps)."""
    mine = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["global_batch"])
    b0, s0 = mine[0]["global_batch"], mine[0]["steps_to_target"]
    out = []
    for r in mine:
        ideal = None if s0 is None else s0 * b0 / r["global_batch"]
        got = r["steps_to_target"]
        out.append({"global_batch": r["global_batch"], "steps_to_target": got,
                    "perfect_scaling": ideal, "efficiency": None if not (got and ideal) else ideal / got,
                    "epochs_to_target": r["epochs_to_target"], "steps_run": r["steps_run"],
                    "target": r["target"]})
    return out


def _pts(a, b) -> str:
    return f"{100 * (a - b):+.1f} points"


def _gap_kind(rows: list[dict], b_small: int, b_big: int, policy: str) -> str:
    """Too few steps or a generalization gap? The training accuracy tells them apart: under-trained,
    the large batch fits its own training images worse too; with a generalization gap it fits them
    as well and only the test images suffer (Hoffer et al., 2017: mostly too few updates)."""
    def one(batch, pol):
        return next(r for r in rows if r["global_batch"] == batch and r["policy"] == pol)
    small, big = one(b_small, "fixed"), one(b_big, policy)
    if small.get("train_acc") is None or big.get("train_acc") is None:
        return ("No training accuracy in these rows, so they cannot tell too few steps from a "
                "generalization gap; at equal epochs the large batch took far fewer steps, and Hoffer "
                "et al. (2017) found such gaps to be mostly too few updates.")
    d_test = small["test_acc"] - big["test_acc"]
    d_train = small["train_acc"] - big["train_acc"]
    head = (f"Training accuracy at the end of the budget: {small['train_acc']:.1%} at B={b_small}, "
            f"{big['train_acc']:.1%} at B={b_big} with {POLICY_TEXT[policy]} ({_pts(-d_train, 0)}, "
            f"against {_pts(-d_test, 0)} on the test images; one run each, no spread): ")
    if d_train >= d_test / 2:
        return head + ("the large batch fits its own training images worse too, so most of the test "
                       "gap is too few steps (under-training), not a generalization gap.")
    return head + ("the large batch fits its training images about as well, so most of the test gap "
                   "is a wider train-test gap: a generalization gap.")


def seed_accs(rows: list[dict], batch: int) -> dict:
    """{policy: [test accuracy of each seed]} at one batch (seed 0's sweep and any further seeds)."""
    out = {}
    for r in rows:
        if r["global_batch"] == batch and r.get("test_acc") is not None:
            out.setdefault(r["policy"], []).append(r["test_acc"])
    return out


def _one_seed_caveat(rows: list[dict], batch: int) -> str | None:
    """Why one seed cannot rank the policies at `batch`: the seeds' range where several ran, and
    the policies run with one seed only (None where every policy ran with several seeds)."""
    accs = seed_accs(rows, batch)
    single = [p for p in POLICIES if len(accs.get(p, [])) == 1]
    many = [p for p in POLICIES if len(accs.get(p, [])) > 1]
    if not single or not many:
        return None
    ranged = "; ".join(f"{POLICY_TEXT[p]} ranged {min(accs[p]):.1%} to {max(accs[p]):.1%} over "
                       f"{len(accs[p])} seeds" for p in many)
    return (f"At B={batch} one seed cannot rank the policies: {ranged}; "
            + ", ".join(POLICY_TEXT[p] for p in single) + " was run with one seed only.")


def _diverged(rows: list[dict], batch: int, chance: float = math.log(10)) -> str | None:
    """Scaled-LR runs at `batch` (seed 0) whose loss rose above chance (ln 10 for 10 classes):
    the peak, its step, and the final loss against chance."""
    hot = [r for r in rows if r["global_batch"] == batch and r.get("seed", 0) == 0
           and r["policy"] != "fixed" and r.get("loss_curve") and max(r["loss_curve"][1:] or [0]) > chance]
    if not hot:
        return None
    def one(r):
        c = r["loss_curve"]
        k = max(range(1, len(c)), key=lambda i: c[i])
        return (f"{POLICY_TEXT[r['policy']]} (peak LR {r['peak_lr']:.3g}) peaked at loss {c[k]:.1f} at step {k + 1} "
                f"and ended at {c[-1]:.2f}")
    return (f"At B={batch} the loss of a scaled-LR run rose above chance (ln 10 = {chance:.2f}): "
            + "; ".join(one(r) for r in hot) + ": the step was too large for these first steps.")


def _rule_gain(gap: list[dict]) -> list[str]:
    """The linear rule against no LR scaling at each batch between the smallest and the largest."""
    return [f"Linear scaling rule at B={g['global_batch']}: {_pts(g['scaled'], g['fixed'])} over no LR "
            f"scaling ({g['fixed']:.1%} -> {g['scaled']:.1%}; seed 0 only, one run each)."
            for g in gap[1:-1] if g.get("scaled") is not None and g.get("fixed") is not None]


def describe(rows: list[dict], fast: bool | None = None, seeded: list[dict] | None = None) -> list[str]:
    """Sentences that say what this sweep measured (numbers from `rows` only); `fast` (default:
    this process's fast mode) adds the fast-mode caveat; a stored reference passes False.
    `seeded`: the further seeds' runs (`warmup_seeds.seed_runs`): where they exist, one seed is not
    allowed to rank the policies at the largest batch (`_one_seed_caveat`)."""
    fast = env.fast_mode() if fast is None else fast
    gap, sc = gap_rows(rows), scaling_rows(rows)
    small, big = gap[0], gap[-1]
    base = small[next(p for p in POLICIES if p in small)]
    acc = {p: big.get(p) for p in POLICIES}
    r0 = rows[0]
    out = [] if not fast else [
        f"FAST MODE: {r0['steps_per_epoch'] * r0['global_batch']} training images, "
        f"{r0['steps'] // r0['steps_per_epoch']} epochs: every run is under-trained and one run's accuracy "
        "moves by several points with the seed. Read it for the mechanics; the full-mode reference "
        "below shows the effect."]
    out += [f"Same epochs for every batch: the smallest batch ({small['global_batch']}, {small['steps']} "
           f"steps) reached {base:.1%} test accuracy; the largest ({big['global_batch']}, only "
           f"{big['steps']} steps) reached " + ", ".join(
               f"{acc[p]:.1%} with {POLICY_TEXT[p]}" for p in POLICIES if acc[p] is not None) + "."]
    best = max((p for p in POLICIES if acc[p] is not None), key=lambda p: acc[p])
    gapped = acc[best] < base - 0.01
    caveat = _one_seed_caveat(rows + list(seeded or []), big["global_batch"])
    out += [caveat] if caveat else []
    out.append(("Highest of seed 0's runs at the largest batch" if caveat else "Best large-batch policy here")
               + f": {POLICY_TEXT[best]}, {_pts(acc[best], base)} against the "
               f"smallest batch" + (" (no gap bigger than 1 point in this run)." if not gapped else
                                    f" (a test-accuracy gap at the same epochs, after {big['steps']} steps "
                                    f"against {small['steps']})."))
    if gapped:
        out.append(_gap_kind(rows, small["global_batch"], big["global_batch"], best))
    out += _rule_gain(gap)
    div = _diverged(rows, big["global_batch"])
    out += [div] if div else []
    if acc.get("scaled") is not None and acc.get("scaled+warmup") is not None:
        out.append(f"Warm-up at the largest batch in this one run: {_pts(acc['scaled+warmup'], acc['scaled'])} "
                   f"over the linear rule alone (peak LR {big['lr scaled']:.3g}); one seed gives no interval, "
                   "so this is not a verdict on warm-up (the verdict over seeds is its own sentence).")
    keeps = [r["global_batch"] for r in sc[1:] if (r["efficiency"] or 0) >= GOOD_EFFICIENCY]
    stops = [r for r in sc[1:] if (r["efficiency"] or 0) < GOOD_EFFICIENCY]
    text = (f"Steps to {sc[0]['target']:.1%} ({POLICY_TEXT['scaled+warmup']}): {sc[0]['steps_to_target']} at "
            f"B={sc[0]['global_batch']}; ")
    if not stops:
        text += "every doubling of the batch cut the steps nearly in half (perfect scaling held)."
    else:
        s = stops[0]
        got = (f"needed {s['steps_to_target']} steps where perfect scaling predicts "
               f"{s['perfect_scaling']:.0f}" if s["steps_to_target"] else
               f"did not reach it in {s['steps_run']} steps (perfect scaling: {s['perfect_scaling']:.0f})")
        text += (f"near-perfect scaling up to B={keeps[-1]}; " if keeps and keeps[-1] < s["global_batch"]
                 else "") + f"from B={s['global_batch']} on, returns diminish: it {got}."
    if caveat:
        text += (" (One seed per batch: where the seeds' accuracies range as above, these step counts "
                 "are one draw, not a verdict.)")
    out.append(text)
    pairs = list(zip(sc, sc[1:]))
    up = next((b for a, b in pairs if a["steps_to_target"] and (  # more steps, or not reached in as many
        (b["steps_to_target"] or 0) > a["steps_to_target"]
        or (not b["steps_to_target"] and b["steps_run"] >= a["steps_to_target"]))), None)
    if up:
        out.append(f"At B={up['global_batch']} a bigger batch no longer saves steps at all: SGD stopped scaling.")
    missed = [r["global_batch"] for r in sc if not r["steps_to_target"]]
    if missed:
        out.append(f"Not reached within the longest run allowed: B={', '.join(map(str, missed))}.")
    return out


def compare_with_lab(row: dict, lab: dict) -> list[dict]:
    """Two rows: `row` (one process) and lab 02's rank-0 metrics `lab` of the same run on W ranks,
    both at the end of the budget of epochs, each with its per-step loss curve (`loss_curve`, the
    global batch's loss) for `findings.lab_agreement`'s verdict on the first steps."""
    def within(step):
        return step if step is not None and step <= row["steps"] else None
    one = {"run": "one process (the sweep)", "global_batch": row["global_batch"], "lr": row["peak_lr"],
           "steps": row["steps"], "final_loss": row["loss_curve"][row["steps"] - 1],
           "test_acc": row["test_acc"], "steps_to_target": within(row["steps_to_target"]),
           "loss_curve": row["loss_curve"][:row["steps"]]}
    ranks = {"run": f"lab 02 on {lab['world_size']} ranks ({lab['hardware']})",
             "global_batch": lab["global_batch"], "lr": lab["lr"], "steps": lab["steps"],
             "final_loss": lab["final_loss"], "test_acc": lab["test_acc"],
             "steps_to_target": lab["steps_to_target"], "loss_curve": lab.get("loss_curve")}
    return [one, ranks]


def main(argv=None):
    """Run the sweep at notebook 02's sizes and print the tables and sentences."""
    from dltutor.core import flags
    from dltutor.core.tables import format_table
    from dltutor.ddp.batch_study import load_study_data, sweep
    p = flags.parser(__doc__)
    p.add_argument("--fast", action="store_true", help="notebook 02's fast-mode sizes")
    a = flags.parse(p, argv)
    size = FAST if a.fast else FULL
    print(f"sizes: {size}")
    data, label = load_study_data(size["train"], size["test"])
    rows = sweep(data, size["batches"], base_lr=size["base_lr"], epochs=size["epochs"],
                 warmup_epochs=size["warmup_epochs"], world_size=size["world_size"],
                 max_epochs=size["max_epochs"], echo=lambda text: print(text, flush=True))
    print(f"data: {label}")
    print(format_table(gap_rows(rows), ["global_batch", "steps", *POLICIES], digits=3))
    print(format_table(scaling_rows(rows), None, digits={"efficiency": 2, "epochs_to_target": 2}))
    from dltutor.ddp import warmup_seeds
    rows += warmup_seeds.seed_runs(data, rows, size["seeds"][1:], echo=lambda text: print(text, flush=True))
    print("\n".join(describe([r for r in rows if r["seed"] == size["seeds"][0]])))
    print("\n".join(warmup_seeds.warmup_findings(warmup_seeds.warmup_table(rows))))
    return rows


if __name__ == "__main__":
    main()
