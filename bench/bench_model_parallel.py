"""Pipeline bubble measured vs (p-1)/(m+p-1), and tensor-parallel time split vs whole, in one run.

    .venv/bin/python bench/bench_model_parallel.py                     # p = 2, m = 1,2,4,8,16
    .venv/bin/python bench/bench_model_parallel.py --stages 2,4 --work sleep,compute

For each p the lab course/labs/06_model_parallel/pipeline.py runs once per kind of stage work
(dltutor.model_parallel.runs, one thread per rank): 'sleep' is the labelled SLEEP stand-in (needs no
CPU), 'compute' the blocks' real compute. Figures, per (work, p, schedule, m):
  * measured bubble (1 - mean stage busy time / step span, median of --steps steps) and the
    formula, and their difference: goal |difference| <= 0.1 with the sleep stand-in;
  * the most micro-batches a stage held (GPipe: m; 1F1B: p).
Then tp_mlp.py on each p: forward+backward of the MLP block split over p ranks / whole (a ratio
from one run; on CPUs it mostly measures gloo's all-reduce latency).
Ranks beyond the core count share cores: those rows are labelled 'oversubscribed'.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dltutor.core.env import cpu_cores  # noqa: E402
from dltutor.core.tables import format_table  # noqa: E402
from dltutor.model_parallel import runs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--stages", default="2", help="pipeline depths / TP sizes to run")
    ap.add_argument("--microbatches", default="1,2,4,8,16")
    ap.add_argument("--work", default="sleep,compute", help="stage work kinds")
    ap.add_argument("--sleep-ms", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args(argv)
    rows, tp_rows = [], []
    for p in [int(x) for x in a.stages.split(",")]:
        crowded = p > cpu_cores()
        for work in a.work.split(","):
            rep = runs.run_pipeline(p, oversubscribe=crowded, work=work, sleep_ms=a.sleep_ms,
                                    microbatches=a.microbatches, steps=a.steps, timeout=1800)
            for r in runs.bubble_rows(rep):
                rows.append({"work": work, **r, "note": "oversubscribed" if crowded else ""})
        tp = runs.run_tp(p, oversubscribe=crowded)
        for b in tp["blocks"]:
            tp_rows.append({"ranks": p, "block": b["block"], "ms whole": b["ms_whole"],
                            "ms split": b["ms_split"], "split / whole": b["ms_split"] / b["ms_whole"],
                            "note": "oversubscribed" if crowded else ""})
    print(format_table(rows, title=f"pipeline bubble vs formula [{rep['hardware']}]"))
    print(format_table(tp_rows, title="tensor parallel: forward+backward time split vs whole"))
    sleepy = [r for r in rows if r["work"] == "sleep"]
    worst = max((abs(r["difference"]) for r in sleepy), default=float("nan"))
    print(f"largest |measured - formula| with the sleep stand-in: {worst:.3f} (goal <= 0.1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
