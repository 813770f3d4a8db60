"""The communication libraries of seed 000 (ATPESC 2025, Argonne) and the backend this run used.

`LIBRARIES` holds one row per library: the seed's own words (`seed_000`, verbatim from its slides
"COMMUNICATION LIBRARY LANDSCAPE", "LIBRARY TRADE-OFFS & SELECTION GUIDE" and "ONECCL IN
DISTRIBUTED TRAINING"; tests/test_landscape.py checks each against the seed file) beside the
course's own summary (vendor / hardware, what it is for, the torch.distributed backend name, from
PyTorch's torch.distributed documentation and the libraries' own pages, not from the seed).

- `table()`: the rows, as a Markdown table in Jupyter and aligned text in a terminal.
- `this_run(summary)`: "this run: gloo on CPU", from what a launched lab's rank 0 reported.
"""
from __future__ import annotations

from dltutor.core.tables import format_table

SEED = "000_ba1b8d5c21578ff2"
COLUMNS = ("library", "vendor / hardware", "what it is for, who uses it", "torch.distributed backend",
           "seed 000 says")

LIBRARIES = [
    {"library": "MPI", "vendor / hardware": "a standard (Open MPI, MPICH, MVAPICH, Cray MPICH); any CPU, "
     "GPU buffers where the build is CUDA/ROCm-aware",
     "what it is for, who uses it": "message passing for HPC codes; Horovod's classic transport, "
     "mpirun/srun launchers",
     "torch.distributed backend": "mpi (only in a PyTorch built from source against an MPI)",
     "seed 000 says": "Portable, mature; rich semantics; CPU-centric."},
    {"library": "NCCL", "vendor / hardware": "NVIDIA; NVIDIA GPUs (NVLink, PCIe, InfiniBand/RoCE)",
     "what it is for, who uses it": "GPU collectives; the default of PyTorch DDP/FSDP, DeepSpeed and "
     "Horovod on NVIDIA GPUs",
     "torch.distributed backend": "nccl",
     "seed 000 says": "NVIDIA GPU collectives; PCIe/NVLink topology-aware."},
    {"library": "RCCL", "vendor / hardware": "AMD; AMD Instinct GPUs (ROCm)",
     "what it is for, who uses it": "NCCL's API on AMD GPUs; PyTorch's ROCm builds use it",
     "torch.distributed backend": "nccl (the ROCm build maps the name to RCCL)",
     "seed 000 says": "AMD ROCm counterpart to NCCL; HIP-enabled."},
    {"library": "oneCCL", "vendor / hardware": "Intel; Intel GPUs (Data Center GPU Max) and CPUs",
     "what it is for, who uses it": "collectives on Intel hardware; PyTorch, Horovod, DeepSpeed on Intel GPUs",
     "torch.distributed backend": "xccl (Intel GPUs, recent PyTorch); ccl (Intel's "
     "oneccl_bindings_for_pytorch)",
     "seed 000 says": "Optimized for Intel GPUs and CPUs."},
    {"library": "Gloo", "vendor / hardware": "Meta, open source; CPUs (TCP), some GPU collectives",
     "what it is for, who uses it": "collectives that run anywhere: PyTorch on CPUs, tests, "
     "laptops; this course on CPUs",
     "torch.distributed backend": "gloo",
     "seed 000 says": "Simple API; CPU/GPU; best < 1 k ranks."},
]

SEED_LINES = (("Vendor lock-in", "NCCL (NVIDIA), RCCL (AMD), oneCCL (Intel)."),
              ("Scalability", "MPI & *CCL proven to 10 k+ GPUs; Gloo ≤ 1 k."),
              ("oneCCL", "Deep integration with PyTorch, TensorFlow, Horovod, IPEX."))
"""Further seed-000 lines shown under the table: (the slide's label, its words verbatim)."""


class Table(list):
    """Rows that render as a Markdown table in Jupyter and as aligned text under print()."""

    def __init__(self, rows, columns, title: str, notes=()):
        super().__init__(rows)
        self.columns, self.title, self.notes = list(columns), title, list(notes)

    def __str__(self) -> str:
        notes = [f"{label}: “{text}”" for label, text in self.notes]
        return "\n".join([format_table(list(self), self.columns, title=self.title, left=self.columns)]
                         + (["seed 000 also says:"] + notes if notes else []))

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        def cell(x) -> str:
            return str(x).replace("|", "\\|").replace("*", "\\*")
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(cell(r.get(c, "")) for c in self.columns) + " |" for r in self]
        if self.notes:
            lines += ["", "Seed 000 also says:"] + [f"- *{label}:* “{cell(text)}”" for label, text in self.notes]
        return "\n".join(lines)


def table() -> Table:
    """The five libraries: the course's summary, and in the last column seed 000's words."""
    return Table([dict(r, **{"seed 000 says": f"“{r['seed 000 says']}”"}) for r in LIBRARIES], COLUMNS,
                 "Communication libraries (last column quoted from seed 000, ATPESC 2025; the rest "
                 "is the course's summary)", notes=SEED_LINES)


def this_run(summary: dict) -> str:
    """'this run: gloo on CPU (4 ranks)' from a lab summary's backend and device (or its label)."""
    backend = summary.get("backend") or summary.get("hardware", "?/?").split("/")[-1]
    dev = summary.get("device") or summary.get("hardware", "?/?").split("/")[0]
    word = "GPU" if str(dev).startswith("cuda") or dev == "GPU" else "CPU"
    return (f"this run: {backend} on {word} ({summary['world_size']} ranks), reported by the "
            "launched ranks")
