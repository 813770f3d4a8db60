"""Notebook 08's sentences that come from torch and DeepSpeed themselves or from the Flight
Recorder's dumps: who is behind and who ahead, the loss scalers on overflows, NCCL's error
handling default. Made-up dumps and in-process scalers; the real hang is in test_debugging.py."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

from dltutor.debug import findings, flight, scaling

NOTEBOOK = (Path(__file__).resolve().parents[1] / "course" / "notebooks"
            / "08_debugging_distributed.ipynb")
OPS = {22: "gloo:broadcast", 23: "gloo:broadcast", 24: "gloo:all_reduce"}


def markdown() -> str:
    """The notebook's markdown, lower case, every run of white space one space."""
    return " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                             if c.cell_type == "markdown").lower().split())


def last(seq, op, ops):
    return {"last_seq": seq, "op": op, "input_sizes": [[1]], "state": "scheduled", "ops": ops}


# the recorded skip (rank 1 skipped its loss all-reduce #25): rank 0 waits, rank 1 ran on
SKIP = {0: last(25, "gloo:all_reduce", {**OPS, 25: "gloo:all_reduce"}),
        1: last(26, "gloo:broadcast", {**OPS, 25: "gloo:broadcast", 26: "gloo:broadcast"})}
ANALYZER = [{"seq": 25, "ranks": [1], "op": "gloo:all_reduce", "kind": "COLLECTIVE_TYPE_MISMATCH"},
            {"seq": 26, "ranks": [0], "op": "gloo:broadcast", "kind": "missing ranks"}]


def test_a_skip_puts_the_healthy_rank_behind_and_the_culprit_ahead():
    pos = flight.behind_and_ahead(SKIP)
    assert (pos["behind"], pos["ahead"], pos["seq"]) == ([0], [1], 25)
    text = " ".join(findings.behind_ahead(pos, ANALYZER))
    assert "Behind: rank(s) [0]" in text and "Ahead: rank 1 at #26 gloo:broadcast" in text
    assert "rank(s) [1] ran gloo:broadcast, not gloo:all_reduce" in text
    assert "the rank ahead is the culprit and the rank behind is the healthy one" in text
    assert "\"missing ranks\" at #26 list rank(s) [0]: the ranks that are behind" in text


def test_a_rank_stuck_before_a_collective_is_the_one_behind():
    stuck = {0: last(24, "gloo:all_reduce", OPS),
             1: last(25, "gloo:all_reduce", {**OPS, 25: "gloo:all_reduce"})}
    text = " ".join(findings.behind_ahead(flight.behind_and_ahead(stuck), []))
    assert "Behind: rank(s) [0]" in text and "the ones that stopped" in text
    assert "culprit" not in text
    gone = {0: SKIP[0], 1: last(26, "gloo:broadcast", {26: "gloo:broadcast"})}
    text = " ".join(findings.behind_ahead(flight.behind_and_ahead(gone), ANALYZER))
    assert "cannot say whether it skipped" in text and "culprit" not in text
    even = {0: SKIP[0], 1: SKIP[0]}
    assert "none is behind" in findings.behind_ahead(flight.behind_and_ahead(even), [])[0]


def test_the_notebook_does_not_say_the_flight_recorder_names_the_culprit_by_being_behind():
    md = markdown()
    assert "flight recorder says which rank is behind" not in md
    assert "the rank that is behind (flight recorder)" not in md
    assert md.count("being behind does not make a rank the culprit") == 2      # c9 and c30


def test_deepspeed_keeps_the_scale_at_the_first_overflow_torch_halves_it():
    ds = scaling.deepspeed_overflows(3)
    assert [(r["before"], r["after"]) for r in ds] == [(65536, 65536), (65536, 32768),
                                                       (32768, 16384)]
    assert "but hysteresis is 2. Reducing hysteresis to 1" in ds[0]["log"]
    assert "reducing to 16384" in ds[2]["log"]
    t = scaling.torch_overflows(2)
    assert [(r["before"], r["after"], r["skipped"]) for r in t] == [(65536.0, 32768.0, True),
                                                                    (32768.0, 16384.0, True)]
    text = " ".join(scaling.scaling_findings(3))
    assert "overflow(s) [1] kept the scale" in text and "3 of 3 logged" in text, text
    md = markdown()
    assert "(0.5 by default, in both)" not in md
    assert "the first overflow only uses it up and keeps the scale" in md


def test_nccl_async_error_handling_is_said_as_the_installed_torch_has_it():
    root = Path(torch.__file__).parent
    header = root / "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
    assert header.exists(), f"the pinned torch wheel ships its C++ headers; {header} is missing"
    assert "the default value (3 - SkipCleanUp)" in header.read_text()
    agent = (root / "distributed/elastic/agent/server/local_elastic_agent.py").read_text()
    assert re.search(r'"TORCH_NCCL_ASYNC_ERROR_HANDLING", str\(1\)', agent)
    md = markdown()
    assert "(the default in recent torch)" not in md
    assert "unset, torch uses 3" in md and "`torchrun` sets 1 for its workers" in md


def test_the_repair_exercise_says_the_check_does_not_run_the_untouched_script():
    md = markdown()
    assert "run the check once as it is" not in md and "to see how it fails" not in md
    assert "the check recognises the script as handed out and does not run it" in md
