"""Notebook 04's DeepSpeed estimator beside the course's formula (dltutor.zero.estimates): what its
extra bytes are, read off the installed DeepSpeed, and the notebook cell that prints it."""
from __future__ import annotations

from pathlib import Path

import deepspeed  # noqa: F401  (the set-up installs it: missing is a failure, never a skip)
import nbformat
import pytest

from dltutor.zero import estimates, memory
from dltutor.zero.bert import build_bert

NOTEBOOK = (Path(__file__).resolve().parents[1] / "course" / "notebooks"
            / "04_deepspeed_out_of_core_bert.ipynb")


def _seed():
    c = memory.SEED_2P5B
    return memory.seed_on_paper(d=2)["p"], estimates.largest_layer(c["h_dim"], c["ff_dim"],
                                                                   c["vocab"], c["seq_len"])


def test_largest_layer_is_deepspeeds_own_count():
    from deepspeed.runtime.zero.stage3 import model_to_params
    for flags in [(2, 32, 64, 2, 50, 8), (1, 16, 256, 2, 40, 8), (1, 8, 16, 2, 500, 4)]:
        _, h, ff, _, vocab, seq = flags
        largest = model_to_params(build_bert(*flags))[1]
        assert largest == estimates.largest_layer(h, ff, vocab, seq)[0], flags
    p, (largest, name) = _seed()
    assert (largest, name) == (1024 * 30522 + 30522, "decoder")   # not the embedding alone


def test_deepspeeds_figure_is_18_bytes_per_parameter_plus_4_per_largest_layer_parameter():
    p, (largest, _) = _seed()
    t = estimates.estimator_terms(p, largest, 2)
    assert (t["per_param"], t["per_layer"]) == (18.0, 4.0)
    assert abs(t["rest"]) < 1                       # nothing else: no buffer term on the GPU
    assert t["gpu_without_factor"] == t["gpu"]      # its 1.5 buffer factor is the CPU column's
    fp32_grads = memory.estimate_zero_memory(p, d=2, z=3, k_g=4).model_states
    assert abs(t["params_term"] - fp32_grads) < 1   # = our formula with fp32 gradients


def test_the_sentences_name_fp32_gradients_and_the_largest_layer_not_buffers():
    p, (largest, name) = _seed()
    text = " ".join(estimates.estimator_findings(p, largest, 2, layer=name))
    assert "counts 18 bytes per parameter divided by d where we count 16" in text, text
    assert "gradients counted in fp32" in text and "4 bytes per parameter of the largest" in text
    assert "31,285,050 parameters, decoder): 0.12 GiB" in text, text
    assert "it counts no buffers and no activations" in text, text
    assert "changes only the per-CPU column" in text, text


def test_notebook_04_prints_the_terms_instead_of_buffers():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cell = next(c.source for c in nb.cells if "deepspeed_estimates(" in c.source)
    assert "and buffers" not in cell and "30522 * 1024" not in cell, cell
    assert "estimates.estimator_findings(" in cell and "estimates.largest_layer(" in cell
    scaling = next(c.source for c in nb.cells if "OVERFLOW!" in c.source and "halves S" in c.source)
    assert "hysteresis: 2" in scaling and "the first one keeps S" in scaling
