"""The hierarchical (2-D) all-reduce against the flat ones over a slower link between nodes, measured.

    sudo .venv/bin/python bench/bench_internode_link.py                    # unlimited, 1gbit, 100mbit
    sudo .venv/bin/python bench/bench_internode_link.py --links 100mbit --sizes 1MiB,16MiB

For each link a 2-node cluster of its own (scripts/slurm_local.sh start --nodes 2 --link RATE: each
node in a network namespace, every byte between the nodes through veths capped at RATE by tc tbf,
no delay added: this kernel has no netem) runs lab 05's hierarchical_allreduce.py as the 2 nodes x
2 ranks job a student gets from `render_job`. Each row is one job: the 2-D all-reduce, our flat
ring and the library's all-reduce (gloo) timed back to back at each size, so a slow spell of the
machine hits all three alike. Figures, per link and size:
  * the time of each (the fastest of --passes sweeps), and ring / hierarchical: > 1 where the 2-D
    scheme wins;
  * at the largest size, the bytes each node sent to the other per all-reduce, counted by its
    interface, against the model (flat ring 1.5 D, hierarchical 1 D for 2 x 2), and the time that
    many bytes take at the cap alone (bytes x 8 / rate): the floor the link sets.
Needs root (namespaces, tc) and the test packages (`bash scripts/setup.sh --test`). Nothing is
left behind: each cluster is stopped, its namespaces, veths and bridge deleted.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dltutor.core.units import fmt_bytes  # noqa: E402
from dltutor.launch import sites, slurm  # noqa: E402

SCRIPT = ROOT / "scripts" / "slurm_local.sh"
LAB = ROOT / "course" / "labs" / "05_allreduce" / "hierarchical_allreduce.py"
ALGORITHMS = ("hierarchical", "ring", "gloo")


def rate_bits(link: str) -> float | None:
    """tc's rate ('100mbit') in bit/s; None for 'unlimited'."""
    m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit)", link)
    return float(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)] if m else None


def run_on_link(link: str, lab_args: list[str], timeout: float) -> dict:
    """Start a linked 2-node cluster, run the 2 x 2 job on it, stop it; rank 0's summary."""
    with tempfile.TemporaryDirectory(prefix="dltutor-link-") as tmp:
        state, work = Path(tmp) / "cluster", Path(tmp) / "job"
        work.mkdir()
        env = {**os.environ, "DLTUTOR_SLURM_DIR": str(state), "SLURM_CONF": str(state / "slurm.conf")}
        cluster = lambda *a: subprocess.run(["bash", str(SCRIPT), *a], env=env, capture_output=True,  # noqa: E731
                                            text=True, timeout=180)
        r = cluster("start", "--nodes", "2", "--link", link)
        if r.returncode:
            raise SystemExit(f"the cluster with --link {link} did not start:\n{r.stdout}{r.stderr}")
        try:
            text = sites.render_job("local", LAB, nodes=2, tasks_per_node=2, launcher="srun",
                                    args=lab_args, job_name="hier_2x2", output="%x-%j.out")
            (work / "hier_2x2.sbatch").write_text(text)
            subprocess.run(["sbatch", "--wait", "hier_2x2.sbatch"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=timeout)
            out = "\n".join(p.read_text(errors="replace") for p in work.glob("hier_2x2-*.out"))
            summary = [m for m in slurm.parse_metrics(out) if m.get("rank") == 0 and "results" in m]
            if not summary or not all(summary[0]["checks"].values()):
                raise SystemExit(f"the job on --link {link} failed:\n{out[-3000:]}")
            return summary[0]
        finally:
            cluster("stop")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--links", default="unlimited,1gbit,100mbit",
                    help="caps on each node's link, in tc's units, or 'unlimited'")
    ap.add_argument("--sizes", default="64KiB,1MiB,4MiB,16MiB", help="all-reduce sizes D")
    ap.add_argument("--iters", type=int, default=5, help="calls back to back per timing")
    ap.add_argument("--passes", type=int, default=3, help="sweeps; each size keeps its fastest")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for one job")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("needs root: the cluster makes network namespaces and sets tc on them")
    lab_args = ["--per-node", "2", "--sizes", a.sizes, "--iters", str(a.iters), "--warmup", "1",
                "--passes", str(a.passes)]
    print(f"lab 05 hierarchical_allreduce.py, 2 nodes x 2 ranks (4 gloo ranks on {os.cpu_count()} "
          "cores of one machine), each node in a network namespace of its own", flush=True)
    print(f"{'link':>10} {'size':>8} " + " ".join(f"{x + ' ms':>15}" for x in ALGORITHMS)
          + f" {'ring/hier':>9}", flush=True)
    for link in a.links.split(","):
        s = run_on_link(link, lab_args, a.timeout)
        t = {(r["algorithm"], r["bytes"]): r["time_s"] for r in s["results"]}
        for d in sorted({r["bytes"] for r in s["results"]}):
            print(f"{link:>10} {fmt_bytes(d):>8} "
                  + " ".join(f"{t[(x, d)] * 1e3:15.2f}" for x in ALGORITHMS)
                  + f" {t[('ring', d)] / t[('hierarchical', d)]:9.2f}", flush=True)
        lb, bits = s["link_bytes"], rate_bits(link)
        for x in ("hierarchical", "ring"):
            got, model = lb["measured"][x], lb["model"][x]
            floor = f", {got * 8 / bits * 1e3:.1f} ms at the cap alone" if bits else ""
            print(f"{'':>10} {fmt_bytes(lb['bytes']):>8} {x}: each node sent {got / lb['bytes']:.2f} x D "
                  f"to the other (model {model / lb['bytes']:.2f} x D){floor}", flush=True)
    print("(times: the fastest of the passes; bytes: counted on each node's interface, "
          "dltutor.allreduce.link)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
