"""Notebook 08 after a second expert read: the straggler said no more precisely than one run each
can say it, torchrun's own SIGTERM time, gloo's Flight Recorder states, the rows the table missed,
the plots' frames and the markdown's unsourced lines. Made-up runs (no launch)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import nbformat

from dltutor.debug import diagnose, findings, flight, hidden, runs, straggler

NOTEBOOK = (Path(__file__).resolve().parents[1] / "course" / "notebooks"
            / "08_debugging_distributed.ipynb")


def outcome(fault, steps=(), fault_t=10.0, caught=None, events=(), fault_rank=1):
    metrics = list(events)
    return SimpleNamespace(fault=fault, fault_rank=fault_rank, fault_t=fault_t, caught=caught or {},
                           failure="", ended_t=fault_t + 1, steps=lambda: list(steps),
                           metrics=metrics, log_dir=None, blamed=[1],
                           of=lambda e: [m for m in metrics if m.get("event") == e])


def step(rank, n, **kw):
    return {"rank": rank, "step": n, "epoch": 0, "t": 10.0 + n, "loss": 1.0, "compute_s": 0.01,
            "backward_s": 0.01, "step_s": 0.03, "update_error": 0.0, "buffer_sums": [1.0, 1.0],
            "param_sums": [2.0, 2.0], **kw}


def straggler_runs():
    """Rank 0's compute drifts 2 -> 19 ms with the straggler (a trend), ~1 ms healthy."""
    drift = [0.0023, 0.0062, 0.0094, 0.0137, 0.0172, 0.019, 0.001]
    slow = [step(r, n, compute_s=(0.001 if n == 0 else drift[n - 1]) if r == 0 else 0.212,
                 backward_s=0.207 if r == 0 else 0.002, step_s=0.222) for n in range(8) for r in (0, 1)]
    ok = [step(r, n, compute_s=0.0011 + 0.0001 * (n % 2), backward_s=0.0009, step_s=0.0038)
          for n in range(8) for r in (0, 1)]
    ev = [{"event": "fault", "rank": 1, "step": 0, "slow_ms": 200.0}]
    return outcome("straggler", slow, events=ev), outcome("none", ok)


def test_the_straggler_gives_medians_ranges_and_rounded_ratios_not_intervals():
    slow, healthy = straggler_runs()
    text = " ".join(findings.straggler(slow, fixed=healthy, load=(14.0, 12.0, 12.5)))
    assert "95 %" not in text and "larger than their 95 %" not in text
    assert "no difference between the two runs is called decided" in text
    assert "about 200x" in text and "about 60x" in text
    assert "rank 0's compute rose from" in text and "which a sleeping straggler does not cause" in text
    assert "this run cannot separate a change from other load" in text
    assert "DDP's forward broadcast of the BatchNorm buffers (a collective)" in text
    assert "load average 14.0, 12.0, 12.5" in text
    assert straggler.about(215.56) == "about 200x" and straggler.about(8.01) == "about 8x"


def test_the_straggler_table_and_takeaway_show_the_range():
    slow, healthy = straggler_runs()
    s, h = (diagnose.straggler(o.steps())["rows"] for o in (slow, healthy))
    rows = straggler.table(s, h)
    assert rows[0]["compute range"] == "1.0–19.0" and "step_ci" not in rows[0]
    line = straggler.takeaway(slow, healthy)[0]
    assert "about 60x; one run each" in line and "steps" in line


def test_torchrun_stop_is_read_from_its_closing_signal_line(tmp_path):
    import datetime as dt
    fault = dt.datetime(2026, 11, 27, 23, 55, 54, 453000).timestamp()
    (tmp_path / "launcher.log").write_text(
        "W1127 23:55:54.637000 8686 torch/distributed/elastic/multiprocessing/api.py:1028] "
        "Sending process 8751 closing signal SIGTERM\n")
    out = runs.Outcome("kill", log_dir=tmp_path, failure="ChildFailedError", blamed=[1],
                       ended_t=fault + 3.01, metrics=[{"event": "fault", "rank": 1, "t": fault}],
                       backend="torchrun")
    assert abs(diagnose.killed(out)["stop_after_s"] - 0.184) < 1e-3
    text = " ".join(findings.killed(out, "torchrun"))
    assert "sent the survivors SIGTERM 0.18 s after the kill" in text
    assert "its process exited 3.01 s after the kill (teardown)" in text


def test_gloo_flight_recorder_states_are_said_to_be_no_evidence(tmp_path, monkeypatch):
    import pickle
    for rank, seqs in ((0, range(1, 26)), (1, range(1, 27))):
        entries = [{"collective_seq_id": q, "profiling_name": "gloo:all_reduce",
                    "state": "scheduled"} for q in seqs]
        (tmp_path / f"{flight.PREFIX}{rank}").write_bytes(pickle.dumps({"entries": entries}))
    pos = flight.behind_and_ahead(flight.last_entries(tmp_path))
    assert pos["states"] == {"scheduled": 51}
    text = " ".join(findings.behind_ahead(pos, []))
    assert "last issued collective is #25" in text and "(state scheduled)" not in text
    assert "'scheduled' (51 of 51" in text and "no evidence of where a rank waits" in text
    monkeypatch.setattr(flight, "findings", lambda text: [{"seq": 25, "op": "gloo:all_reduce",
                                                            "kind": "missing ranks", "ranks": [0]}])
    out = SimpleNamespace(fr_text="x", fr_last=flight.last_entries(tmp_path))
    text = " ".join(findings.flight(out))
    assert "A fact of this torch, not a measurement of this run: re-keyed" in text
    assert "Adaptation needed" not in text


def test_the_table_has_the_unchecked_shape_and_the_scaled_nan_and_gloo_caveat():
    hang = outcome("skip", caught={0: (8.005, "Timed out waiting 8000ms")})
    bare = outcome("shape", caught={0: (8.02, "Timed out waiting 8000ms for send")})
    nan = outcome("nan", [step(1, 3, loss=float("nan"), t=10.005)])
    quiet = outcome("order")
    rows = hidden.time_to_message(hang=hang, order=quiet, shape=quiet, dtype=quiet,
                                  no_set_epoch=quiet, drift={}, slow=outcome("straggler"),
                                  nan=nan, killed=outcome("kill"), slow_ms=200,
                                  group_timeout_s=8.0, bare=bare, scaled=nan)
    by = {r["section"]: r for r in rows}
    assert by["2 shape, no check"]["first_message_s"] == 8.02
    assert by["5 nan+loss scaling"]["first_message_s"] is not None
    text = " ".join(hidden.caveats(rows, no_set_epoch=quiet, slow=outcome("straggler"),
                                   healthy=outcome("none"), drift={}, group_timeout_s=8.0))
    assert "on gloo, with torch's default (30 min)" in text and "an extrapolation, not run" in text
    assert "load average not recorded" in text


def test_the_plots_are_a_dot_plot_and_carry_the_step_range(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.container import ErrorbarContainer

    from dltutor.debug import plots
    rows = [{"section": "1 hang", "fault": "skip", "first_message_s": 8.0,
             "found_by": "the step report's loss (every step, no check)"}]
    ax = plots.plot_time_to_message(rows, path=tmp_path / "t.png").axes[0]
    assert not ax.patches and ax.lines            # dots, not bars from an arbitrary origin
    label = ax.get_yticklabels()[0].get_text()
    assert "(every step, no check)" in label.replace("\n", " ") and label.count("(") == label.count(")")
    slow, healthy = straggler_runs()
    s, h = (diagnose.straggler(o.steps())["rows"] for o in (slow, healthy))
    ax = plots.plot_straggler(s, h).axes[0]
    assert any(isinstance(c, ErrorbarContainer) for c in ax.containers)


def test_the_markdown_sources_or_drops_its_unrun_claims():
    md = " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                           if c.cell_type == "markdown").split())
    assert "`DETAIL` works the same on NCCL" not in md and "Debugging torch.distributed" in md
    assert "is summed silently wrong on a transport" not in md
    assert "stragglers, NaN) need checks" not in md and "a NaN shows in the loss you already log" in md
    assert "records neither its start nor its completion" in md
    assert "95 % interval, one run each" not in md


def test_saved_figures_keep_their_title_and_labels(tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from dltutor.debug import plots
    seen = []
    monkeypatch.setattr(Figure, "savefig", lambda self, path, **kw: seen.append(kw))
    rows = [{"section": "1 hang", "fault": "skip", "first_message_s": 8.0, "found_by": "x"}]
    plots.plot_time_to_message(rows, path=tmp_path / "t.png")
    slow, healthy = straggler_runs()
    s, h = (diagnose.straggler(o.steps())["rows"] for o in (slow, healthy))
    plots.plot_straggler(s, h, path=tmp_path / "s.png")
    assert seen and all(kw.get("bbox_inches") == "tight" for kw in seen), seen


def test_the_hang_says_which_seconds_it_prints_and_the_runs_record_the_load():
    out = outcome("skip", caught={0: (8.005, "Timed out waiting 8000ms"),
                                  1: (8.007, "Timed out waiting 8000ms")})
    out.left_running = []
    text = findings.hang(out, 8.0)[0]
    assert "the first rank's error came 8.005 s after the fault, the last one's 8.007 s" in text
    assert "load" in runs.Outcome.__dataclass_fields__
    src = {c.id: c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells}
    assert "load=slow.load" in src["9c157b93"] and "load=slow.load" in src["5118e724"]
    assert "bare=bare if UNCHECKED else None, scaled=scaled" in src["5118e724"]
