"""What the notebooks' prose may say: no outcome of the run written ahead of it, sources named (#20).

The sentences below were once in the notebooks and stated what a student's run would show before it
ran (or credited a seed with a finding it does not state). Each now comes from the run's numbers
(the topics' `findings`) or names its source; these tests keep them out and the sources in.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "course" / "notebooks"


def markdown(stem: str) -> str:
    nb = json.loads(next(NOTEBOOKS.glob(f"{stem}_*.ipynb")).read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def flat(text: str) -> str:
    return " ".join(text.split())


WRITTEN_BEFORE_THE_RUN = [
    ("02", "warm-up once lost 15 points"),
    ("02", "B = 1024 needed more steps than B = 512 (152 vs 112)"),
    ("02", "a measured, honest result"),
    ("03", "Horovod and DDP land close to each other"),
    ("03", "expect an efficiency well below"),
    ("04", "even stage 3 does not fit 16 GB because"),
    ("04", "On a 32 GB GPU stage 1 already fits"),
    ("04", "The losses lie on top of each other"),
    ("06", "Measured bubbles fall with m as the formula does and sit above it"),
    ("06", "which you measured shrinking as m grows"),
    ("06", "every run here is real, on"),
    ("06", "It is exact by construction"),
    ("06", "it only pays off on fast links: keep it inside a node"),
    ("06", "what it cost on this machine's shared memory is in the TP findings"),
    ("06", "as on a GPU, where the CPU only waits for the kernels"),
    ("06", "DP outermost (one gradient all-reduce per step"),
    ("06", "data parallelism is measured in notebooks 02–05"),
    ("07", "its device sits idle (red) most of each step"),
    ("07", "The files are warm here (they were just read)"),
    ("07", "only helps when the consumer is sometimes faster than the producers"),
    ("07", "an all-reduce that never returns"),
    ("07", "which is why I/O matters more on GPUs than on this CPU"),
]


@pytest.mark.parametrize("stem,sentence", WRITTEN_BEFORE_THE_RUN)
def test_no_outcome_written_before_the_run(stem, sentence):
    assert sentence not in flat(markdown(stem)), f"notebook {stem} states a run's outcome: {sentence!r}"


@pytest.mark.parametrize("stem", ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10"])
def test_every_notebook_prints_what_its_run_showed(stem):
    nb = json.loads(next(NOTEBOOKS.glob(f"{stem}_*.ipynb")).read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "show(" in code and "findings" in code, f"notebook {stem} has no findings cell"


def test_02_credits_the_bucket_finding_to_the_ddp_paper_not_the_slide():
    text = flat(markdown("02"))
    at = text.index("Latency vs. Bucket Size")
    around = text[max(0, at - 900):at + 300]
    assert "Li et al." in around and "VLDB 2020" in around and "states no result" in around


def test_02_says_where_batchnorm_breaks_the_one_process_equivalence():
    text = flat(markdown("02"))
    at = text.index("take exactly the SGD step of one process")
    assert "as long as the model has no BatchNorm" in text[at:at + 400]
    assert "SyncBatchNorm" in text[at:at + 800]


def test_06_labels_the_seed_table_adapted_and_counts_stages_from_0():
    text = flat(markdown("06"))
    assert "adapted from seed 003" in text
    assert "between stages 2 and 3" not in text


def test_06_lists_what_it_leaves_out_with_sources():
    text = flat(markdown("06"))
    at = text.index("What this notebook leaves out")
    for source in ("arXiv:1909.08053", "arXiv:2205.05198", "arXiv:2104.04473", "arXiv:2401.10241"):
        assert source in text[at:]
