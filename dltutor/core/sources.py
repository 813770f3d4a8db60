"""Every figure and log line the course quotes from its seeds (the talks it is built from), in one place.

The seeds are plain-text extractions of five talks (`shared/seeds/NNN_<id>.txt` beside the checkout,
see its README). A `Quote` holds the seed text exactly as the extraction has it, typos included
("qpu01", "RunningAvqSamplesPerSec", "+ -0.2" are the extraction's, not ours), the figures the course
takes from it, and what they are (hardware, launcher, sizes). Notebooks, labs and library code read
their seed numbers from here (`figure(key)`, `QUOTES[key].text`); `tests/test_sources.py` checks
every figure against its line, every line against the seed file, and the course against this table.

Slide tables whose cells the extraction broke over two lines (the ring slides of seed 004) are
registered with `wrapped=True`: their figures are compared with the whitespace removed, e.g.
"A6+H6+G6" in "A6+H6+\\u2028\\nG6" (the extraction ends such a cell with U+2028).

What the seeds do NOT give is not here: the course labels such values as its own assumptions
(e.g. the BERT sequence length and heads in notebook 04, the image size 224 of Horovod's benchmark).
"""
from __future__ import annotations

from dataclasses import dataclass

SEEDS = {  # file stem -> what the talk is (shared/seeds/README.md)
    "000_ba1b8d5c21578ff2": "ATPESC 2025, Distributed Deep Learning (Argonne)",
    "001_8d3d098acec102ac": "OSU HiDL tutorial (HotI '25)",
    "002_56aaf6241b1530cf": "JSC / Helmholtz AI, Distributed Training and Data Parallelism",
    "003_4d3c855505c5c36c": "NVIDIA DLI / BINUS, Distributed Deep Learning: A Brief Introduction",
    "004_2167bef5a9bcba54": "TACC Frontera notebooks",
}


@dataclass(frozen=True)
class Quote:
    """One passage of a seed: `text` verbatim (consecutive lines joined by "\\n"), the `figures` the
    course takes from it (each verbatim in `text`), the `seed` file stem, and `what` it is."""
    seed: str
    text: str
    figures: tuple[str, ...]
    what: str
    wrapped: bool = False

    def has(self, figure: str) -> bool:
        if self.wrapped:
            return "".join(figure.split()) in "".join(self.text.split())
        return figure in self.text


_HVD = ("Horovod examples/pytorch/pytorch_synthetic_benchmark.py, ResNet-50, batch 64/GPU, "
        "synthetic data, V100")
_HVD1 = _HVD + "; 1 node x 1 GPU, plain python under `srun -N 1` (OSU HiDL lab 1, task 1)"
_HVD2 = _HVD + "; 2 nodes x 1 GPU, MVAPICH-Plus `mpirun_rsh -np 2` (OSU HiDL lab 1, task 2)"
_DS = ("DeepSpeed ZeRO, 2.5B BERT (train_bert_ds.py --num_layers 192 --ff_dim 4096 --h_dim 1024 "
       "--batch_size 1), 2 GPUs on 2 nodes, `deepspeed -H hosts` (OSU HiDL lab 2, task 2)")
_RING = "TACC slides, ring all-reduce on P0..P7: letter = the rank's data, digit = the chunk"

QUOTES: dict[str, Quote] = {
    # ---- seed 000: large-batch ImageNet training table (notebook 02's batch-size study)
    "imagenet_8k_goyal": Quote("000_ba1b8d5c21578ff2",
                               "| 2017 | 8,192 | P100 × 256 | Caffe2 | 1 hr | 76.3 % |",
                               ("8,192", "256", "1 hr", "76.3"),
                               "ResNet-50 on ImageNet, global batch 8,192 on 256 P100s (Goyal et al. 2017)"),
    # ---- seed 001, lab 1: Horovod's synthetic benchmark (notebook 03, horovod/runs.py)
    "hvd_1gpu_per_gpu": Quote("001_8d3d098acec102ac", "Img/sec per GPU: 336.0 + -0.2",
                              ("336.0", "0.2"), _HVD1),
    "hvd_1gpu_total": Quote("001_8d3d098acec102ac", "Total img/sec on 1 GPU(s): 336.0 + -0.2",
                            ("336.0",), _HVD1),
    "hvd_1gpu_command": Quote(
        "001_8d3d098acec102ac",
        "$ srun -N 1 --reservation=dltutorial run pytorch bench single.sh\n"
        "+ python /opt/tutorials/hidl-env/horovod/examples/pytorch/pytorch_synthetic_benchmark.py --\n"
        "batch-size=64 --model=resnet50 --num-iters=5",
        ("srun -N 1", "batch-size=64", "--model=resnet50", "--num-iters=5"), _HVD1),
    "hvd_2gpu_task": Quote(
        "001_8d3d098acec102ac",
        "Lab 1 – Task 2: Run PyTorch on two nodes with 1 GPU/node (using MVAPICH-Plus)",
        ("two nodes with 1 GPU/node", "MVAPICH-Plus"), _HVD2),
    "hvd_2gpu_launcher": Quote(
        "001_8d3d098acec102ac",
        "+ mpirun_rsh --export-all -np 2 --hostfile hosts_424919 python /opt/tutorials/hidl-",
        ("mpirun_rsh", "-np 2"), _HVD2),
    "hvd_2gpu_per_gpu": Quote("001_8d3d098acec102ac", "Img/sec per GPU: 325.2 +-1.8",
                              ("325.2", "1.8"), _HVD2),
    "hvd_2gpu_total": Quote("001_8d3d098acec102ac", "Total img/sec on 2 GPU(s): 650.3 + -3.6",
                            ("650.3", "3.6"), _HVD2),
    "hvd_2gpu_iter0": Quote("001_8d3d098acec102ac", "Iter #0: 326.8 img/sec per GPU", ("326.8",), _HVD2),
    "hvd_2gpu_claim": Quote("001_8d3d098acec102ac", "~1.9X on\n```\n\n2 GPUs",
                            ("~1.9X",), _HVD2 + "; the slide's rounded speed-up"),
    "hvd_batch": Quote("001_8d3d098acec102ac", "Model: resnet50", ("resnet50",), _HVD),
    # ---- seed 001, lab 2: the 2.5B BERT (notebook 04, zero/memory.py SEED_2P5B)
    "bert_flags": Quote(
        "001_8d3d098acec102ac",
        "--num_layers 192 --ff_dim 4096 --h_dim 1024 --batch_size 1 --num_iterations 10",
        ("192", "4096", "1024", "--batch_size 1"), "the 2.5B BERT's flags (train_bert.py and "
        "train_bert_ds.py); the seed gives no sequence length, heads or vocabulary"),
    "bert_size": Quote("001_8d3d098acec102ac",
                       "Lab 2 – Task 1: Test a 2.5B Bert DNN on a single GPU", ("2.5B",),
                       "plain PyTorch + Adam on one V100 (`srun -N 1 -p bdw-v100`)"),
    "bert_oom_where": Quote(
        "001_8d3d098acec102ac",
        "state['exp avg sq'] = torch.zeros like(p, memory format=torch.preserve format)",
        ("exp avg sq",), "where the single-GPU run dies: Adam allocating its variance "
        "(exp_avg_sq; the extraction lost the underscores)"),
    "bert_oom": Quote("001_8d3d098acec102ac",
                      "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 MiB. GPU",
                      ("CUDA out of memory", "16.00 MiB"), "the single-GPU run's error"),
    "ds_timer_0_4": Quote(
        "001_8d3d098acec102ac",
        "qpu01: [2022-12-31 22:50:20,415] [INFO] [timer.py:197:stop] 0/4, "
        "RunningAvqSamplesPerSec=1.989045629615473, CurrSamplesPerSec=1.9197348998894654,\n"
        "MemAllocated=18.42GB, MaxMemAllocated=25.43GB",
        ("[timer.py:197:stop] 0/4", "MemAllocated=18.42GB", "MaxMemAllocated=25.43GB",
         "1.989045629615473"), _DS + "; DeepSpeed's throughput/memory line after step 4"),
    "ds_overflow_first": Quote(
        "001_8d3d098acec102ac",
        "gpu01: [2022-12-31 22:50:21,470] [INFO] [stage_1_and_2.py:1765:step] [deepspeed] "
        "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 268435456.0,\nreducing to 134217728.0",
        ("OVERFLOW! Rank 0 Skipping step.", "268435456.0", "134217728.0"),
        _DS + "; fp16 dynamic loss scaling: the first skipped step"),
    "ds_timer_0_5": Quote(
        "001_8d3d098acec102ac",
        "qpu01: [2022-12-31 22:50:21,472] [INFO] [timer.py:197:stop] 0/5, "
        "RunningAvgSamplesPerSec=1.9581760061302556, CurrSamplesPerSec=1.8992247658347254,\n"
        "MemAllocated=18.42GB, MaxMemAllocated=25.44GB",
        ("0/5", "MaxMemAllocated=25.44GB"), _DS),
    "ds_overflow_last": Quote(
        "001_8d3d098acec102ac",
        "gpu01: [2022-12-31 22:50:25,644] [INFO] [stage 1 and 2.py:1765:step] [deepspeed] "
        "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 16777216.0,\nreducing to 8388608.0",
        ("16777216.0", "8388608.0"),
        _DS + "; the fifth overflow in a row, the scale halved each time"),
    "ds_timer_0_9": Quote(
        "001_8d3d098acec102ac",
        "qpu01: [2022-12-31 22:50:25,645] [INFO] [timer.py:197:stop] 0/9, "
        "RunningAvqSamplesPerSec=1.9380716205436017, CurrSamplesPerSec=1.883938232505326,\n"
        "MemAllocated=18.42GB, MaxMemAllocated=25.44GB",
        ("0/9", "MemAllocated=18.42GB", "MaxMemAllocated=25.44GB"), _DS + "; the last line"),
    "zero_anatomy": Quote("001_8d3d098acec102ac",
                          "$$M_{Tot} = M_{\\rm m} + M_{\\rm o} + M_{\\rm g} + M_{\\rm a}$$",
                          ("M_{Tot}",), "the ZeRO memory anatomy"),
    "zero_activations": Quote(
        "001_8d3d098acec102ac",
        "$$M_{\\rm a} \\approx sbhL([16k_l + 2] + [2k_l + 1]\\frac{a \\cdot s}{h})$$",
        ("16k_l + 2", "2k_l + 1"), "activation memory per device (never partitioned)"),
    # ---- seed 004: ring all-reduce (notebook 05, allreduce/ring.py)
    "ring_start_p0": Quote("004_2167bef5a9bcba54", "A0 A1 A2 A3 A4 A5 A6 A7P0",
                           ("A0", "A7", "P0"), _RING + "; before any step"),
    "ring_step1_p0": Quote("004_2167bef5a9bcba54", "A0 A1 A2 A3 A4 A5 A6 A7+H7P0",
                           ("A7+H7",), _RING + "; reduce phase step 1: P7 sent chunk 7"),
    "ring_step1_p1": Quote("004_2167bef5a9bcba54", "B0+A0 B1 B2 B3 B4 B5 B6 B7P1",
                           ("B0+A0",), _RING + "; reduce phase step 1: P0 sent chunk 0"),
    "ring_step2_p0": Quote("004_2167bef5a9bcba54", "A0 A1 A2 A3 A4 A5 A6+H6+\u2028\nG6 A7+H7P0",
                           ("A6+H6+G6",), _RING + "; reduce phase step 2", wrapped=True),
    "ring_step2_p7": Quote("004_2167bef5a9bcba54", "H0 H1 H2 H3 H4 H5+G5+\u2028\nF5 H6+G6 H7P7",
                           ("H5+G5+F5", "H6+G6"), _RING + "; reduce phase step 2", wrapped=True),
    "ring_reduce_phase": Quote("004_2167bef5a9bcba54", "AllReduce — Reduce Phase", ("Reduce Phase",),
                               _RING + "; the slides' name for reduce-scatter"),
    "ring_scatter_phase": Quote("004_2167bef5a9bcba54", "AllReduce — Scatter Phase",
                                ("Scatter Phase",), _RING + "; the slides' name for all-gather"),
    "ring_steps": Quote("004_2167bef5a9bcba54", "• (N-1) Reduce Steps\n\n\n• (N-1) Scatter Steps",
                        ("(N-1) Reduce Steps", "(N-1) Scatter Steps"), _RING),
    "ring_cost": Quote("004_2167bef5a9bcba54", "T = 2(N − 1)(α + Bβ)", ("2(N − 1)",),
                       "the ring's cost, B = D/N bytes per step"),
}


def figure(key: str, index: int = 0) -> float:
    """The `index`-th figure of quote `key` as a number, e.g. figure("hvd_2gpu_total") == 650.3."""
    try:
        return float(QUOTES[key].figures[index])
    except KeyError:
        raise KeyError(f"no seed quote {key!r}; the registered ones are {sorted(QUOTES)}") from None


def where(key: str) -> str:
    """A citation for the notebook: 'seed 001 (OSU HiDL tutorial (HotI '25))'."""
    q = QUOTES[key]
    return f"seed {q.seed[:3]} ({SEEDS[q.seed]})"
