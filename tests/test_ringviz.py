"""dltutor.allreduce.visualizer: the ring all-reduce widget steps, relabels and models time (no browser)."""
import pytest

import ipywidgets  # noqa: F401  (installed by the set-up: a missing widget library must fail)

from dltutor.allreduce import cost as cm
from dltutor.allreduce.visualizer import RingVisualizer, cell_colour, grid_html


def test_next_prev_and_phase_text():
    v = RingVisualizer(n=8)
    assert "start" in v.phase.value and ">A6+H6+G6</td>" not in v.grid.value
    assert "A0" in v.grid.value and "H7" in v.grid.value      # P0 holds A0..A7, P7 H0..H7
    v.next.click()
    v.next.click()
    assert v.step.value == 2
    assert "reduce-scatter step 2 of 7" in v.phase.value and "Reduce Phase" in v.phase.value
    assert ">A6+H6+G6</td>" in v.grid.value      # the seed's label (P0, chunk 6), in the grid
    assert ">H5+G5+F5</td>" in v.grid.value           # ... and P7's chunk 5, as on the slide
    assert "P6 → P7: G5+F5" in v.links.value     # the message on link 6 -> 7: chunk 6 - 2 + 1
    for _ in range(7):
        v.next.click()
    assert "all-gather step 2 of 7" in v.phase.value and "Scatter Phase" in v.phase.value
    for _ in range(20):
        v.next.click()
    assert v.step.value == 14 and "all-gather step 7 of 7" in v.phase.value
    assert v.grid.value.count(cell_colour(8, 8)) >= 64  # every cell fully summed
    v.prev.click()
    assert v.step.value == 13
    assert "dltutor-ring-phase" in v.phase._dom_classes
    assert "dltutor-ring-next" in v.next._dom_classes and v.next.description == "Next"


def test_changing_n_clamps_step_and_resizes_grid():
    v = RingVisualizer(n=8, step=12)
    v.n.value = 3
    assert v.step.max == 4 and v.step.value == 4 and v.play.max == 4
    assert "<th style='padding:2px 6px'>P2</th>" in v.grid.value and "P3<" not in v.grid.value
    v.n.value = 16
    assert v.step.max == 30 and "P15" in v.grid.value


def test_modelled_time_and_bytes_follow_sliders():
    v = RingVisualizer(n=4, nbytes=2**20, alpha=10e-6, bandwidth=1e9)
    v.step.value = v.step.max
    t = cm.ring_time(4, 2**20, v.alpha.value * 1e-6, 1 / (v.bw.value * 1e9))
    assert v.state.elapsed == pytest.approx(t)
    assert "1.5 MiB of 1.5 MiB" in v.stats.value  # 2(N-1)/N * D = 1.5 MiB per rank
    v.alpha.value = 100.0
    assert v.state.elapsed == pytest.approx(cm.ring_time(4, 2**20, 100e-6, 1 / (v.bw.value * 1e9)))


def test_grid_marks_arrivals_and_counts():
    v = RingVisualizer(n=5, step=1)
    html = grid_html(v.state)
    assert html.count("2px solid #1f4e9c") == 5 + 1  # 5 arrivals + the legend
    assert cell_colour(1, 8) != cell_colour(4, 8) != cell_colour(8, 8)
