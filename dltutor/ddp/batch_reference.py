"""A labelled reference for notebook 02's large-batch study: one full-mode sweep, measured once.

Not this run, and not this run's sizes: the numbers were measured by `DLTUTOR_OFFLINE=1
.venv/bin/python -m dltutor.ddp.batch_report` at the full-mode sizes of 2026-11-23 (`SIZES`: six
batch sizes, one seed; today's full mode runs three batch sizes with three seeds each) on the course's
2-core CPU machine, shared with other jobs, 38 min wall, with Fashion-MNIST (16,384 / 2,000 images,
base LR 0.005 at B = 32, 1-epoch warm-up, images grouped as on 2 ranks); target = 95 % of the
B = 32 accuracy; committed with the course on 2026-11-23 (commit cbc3f19). A second measurement grouped the images as on 1 rank and differed only at B = 1024.

* `rows()`: the reference as rows of the shape `batch_study.sweep` returns, so that
  `batch_report.describe(rows(), fast=False)` prints its sentences with the same code as this run's.
* `findings()`: those sentences plus the B = 1024 warm-up result of both groupings.
"""
from __future__ import annotations

from dltutor.core.findings import trend
from dltutor.ddp.batch_report import describe, scaling_rows

# the full-mode sizes the reference was measured at (batch_report.FULL of 2026-11-23), one seed
SIZES = dict(train=16384, test=2000, epochs=4, batches=[32, 64, 128, 256, 512, 1024], base_lr=0.005,
             warmup_epochs=1.0, world_size=2, max_epochs=12)
FULL = SIZES

SOURCE = ("measured once by `DLTUTOR_OFFLINE=1 .venv/bin/python -m dltutor.ddp.batch_report` "
          "(the full-mode sizes of 2026-11-23: 16,384 images, B = 32 to 1024, ONE seed; Fashion-MNIST, the course's 2-core CPU machine shared with other jobs, "
          "38 min wall; committed 2026-11-23)")
TARGET = 0.797
# global batch: (accuracy after 4 epochs with no LR scaling, linear rule, rule + warm-up;
#                steps to TARGET with rule + warm-up)
TABLE = {32: (0.839, 0.839, 0.839, 896), 64: (0.812, 0.840, 0.844, 640), 128: (0.761, 0.836, 0.821, 352),
         256: (0.722, 0.826, 0.832, 160), 512: (0.686, 0.790, 0.802, 112), 1024: (0.599, 0.688, 0.539, 152)}
# the second measurement (images grouped as on 1 rank), B = 1024: linear rule, rule + warm-up
ONE_RANK_1024 = {"scaled": 0.560, "scaled+warmup": 0.637}


def rows() -> list[dict]:
    """The reference table as sweep rows (one per global batch and LR policy)."""
    out, b0 = [], min(TABLE)
    for batch, (*accs, to_target) in TABLE.items():
        per_epoch = FULL["train"] // batch
        for policy, acc in zip(("fixed", "scaled", "scaled+warmup"), accs):
            mine = policy == "scaled+warmup"
            out.append({"global_batch": batch, "policy": policy, "test_acc": acc,
                        "steps": FULL["epochs"] * per_epoch, "steps_per_epoch": per_epoch,
                        "peak_lr": FULL["base_lr"] * (1 if policy == "fixed" else batch / b0),
                        "steps_to_target": to_target if mine else None,
                        "epochs_to_target": to_target / per_epoch if mine else None,
                        "steps_run": None, "target": TARGET})
    return out


def findings() -> list[str]:
    """The reference's sentences (`batch_report.describe`), and warm-up at B = 1024 in both groupings."""
    big = max(TABLE)
    two = TABLE[big][2] - TABLE[big][1]
    one = ONE_RANK_1024["scaled+warmup"] - ONE_RANK_1024["scaled"]
    sc = scaling_rows(rows())[1:]
    return describe(rows(), fast=False) + [
        trend("steps-to-target efficiency (perfect-scaling steps / measured steps)",
              [r["global_batch"] for r in sc], [round(r["efficiency"], 2) for r in sc], x_name="B"),
        f"Warm-up at B={big} in the two groupings of the images: {100 * two:+.1f} points as on 2 ranks, "
        f"{100 * one:+.1f} points as on 1 rank" + (
            ": opposite signs, so at this batch the effect of warm-up is not settled by one run."
            if two * one < 0 else ".")]
