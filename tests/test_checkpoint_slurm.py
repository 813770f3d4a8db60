"""Lab 10 on the course's local Slurm (issue #40): a job whose --time ends mid-training saves on
Slurm's signal, requeues itself and resumes; a 2-node job that loses a node resumes once the node is
back. Both end with the parameters of one uninterrupted run, bit for bit. Plus the test cluster's
start waiting for each daemon's pid file, and the errors without Slurm."""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from dltutor.checkpoint import batch
from dltutor.launch import slurm
from dltutor.launch.job_faults import SlurmError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
TIMEOUT = 600


def _queue() -> str:
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True,
                          timeout=30).stdout.strip()


@pytest.fixture(scope="module")
def jobs(slurm_cluster, tmp_path_factory):
    """Both jobs at once (the requeue job kept on node1, the node-loss job killing node2), and the
    uninterrupted reference run on 2 local ranks meanwhile; each job's collect() result."""
    deadline = time.monotonic() + 90     # earlier tests' jobs may still be completing
    while (others := _queue()) and time.monotonic() < deadline:
        time.sleep(1)
    assert not others, f"other jobs on the cluster; killing node2 would kill them too: {others}"
    work = tmp_path_factory.mktemp("ckpt-slurm")
    requeue = batch.submit_requeue(work, nodelist="node1")
    node_loss = batch.submit_node_loss(work, timeout=TIMEOUT)
    try:
        ref = batch.reference(work)
        out = {"reference": ref, "requeue": batch.collect(requeue, TIMEOUT),
               "node_loss": batch.collect(node_loss, TIMEOUT)}
    finally:
        for job in (requeue, node_loss):
            slurm.cancel(job.job_id)
        if node_loss.driver is not None:
            node_loss.driver.join(timeout=300)   # it revives node2 however it went
    for kind in ("requeue", "node_loss"):
        print(f"{kind}: " + "; ".join(f"segment {s['restart_count']} steps {s['first_step']}..{s['last_step']} "
                                      f"resumed from {s['resumed_from']} stop {s['stop']}"
                                      for s in out[kind]["segments"]))
    return out


def _ranks_agree(seg, key):
    values = {r.get(key) for r in seg["ranks"]}
    assert len(values) == 1, f"ranks disagree on {key}: {seg['ranks']}"
    return values.pop()


def test_requeue_job_saves_on_the_signal_and_resumes_bit_for_bit(jobs):
    out, ref = jobs["requeue"], jobs["reference"]
    assert out["state"] == "COMPLETED", out["text"]
    first, second = out["segments"]                      # exactly two runs, one log
    steps = ref["steps"]
    assert first["restart_count"] == 0 and second["restart_count"] == 1, out["text"]
    assert "batch shell: SIGUSR1" in out["text"]         # Slurm warned the batch shell, it forwarded
    assert first["stop"] == "SIGUSR1" and first["status"] == 75, out["text"]
    stopped = _ranks_agree(first, "signal_stop_step")    # every rank stopped after the same step
    assert 0 < stopped == first["last_step"] < steps, out["text"]
    assert [s[0] for s in first["ranks"][0]["saves"]][-1] == stopped   # ...and saved that step
    assert second["slurm_restart_count"] == 1 and second["resumed_from"] == stopped, out["text"]
    assert second["stop"] == "completed" and second["status"] == 0 and second["last_step"] == steps
    assert _ranks_agree(second, "paced_s") == 0        # only the first segment is paced
    # bit for bit: the losses of both segments are the uninterrupted run's, and so are the parameters
    assert first["ranks"][0]["losses"] + second["ranks"][0]["losses"] == ref["losses"]
    assert out["param_digest"] == ref["param_digest"]
    assert any(ln.startswith("segment 1 of job") for ln in out["log_lines"])
    assert any(f"SIGUSR1: stopped after step {stopped}, saved" in ln for ln in out["log_lines"])


def test_node_loss_job_resumes_once_the_node_is_back(jobs):
    out, ref = jobs["node_loss"], jobs["reference"]
    assert "error" not in out["events"], out["events"]
    assert out["state"] == "COMPLETED", out["text"]
    first, second = out["segments"]
    assert first["restart_count"] == 0 and first["stop"] != "completed", out["text"]
    killed_after = int(out["events"]["killed_after_checkpoint"].split("-")[1])
    assert second["restart_count"] == 1 and second["resumed_from"] >= killed_after, out["text"]
    assert second["stop"] == "completed" and second["last_step"] == ref["steps"]
    assert out["param_digest"] == ref["param_digest"]
    assert second["ranks"][0]["losses"] == ref["losses"][second["resumed_from"]:]
    states = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                            timeout=30).stdout
    assert re.search(r"node2 (idle|mixed|allocated)", states), states   # back in service


def test_segments_are_read_from_one_appended_log():
    text = ("segment 0 of job 7 on node1 (10:00:00): SLURM_RESTART_COUNT=0\n"
            '0: DLTUTOR_METRICS {"rank": 0, "stop_signal": "SIGUSR1", "steps": 5, "first_step": 0, '
            '"resumed_from": null, "param_digest": "a"}\n'
            "segment 0: the training step ended with status 75 (10:00:30)\n"
            "segment 1 of job 7 on node1 (10:01:00): SLURM_RESTART_COUNT=1\n"
            '0: DLTUTOR_METRICS {"rank": 0, "stop_signal": null, "steps": 9, "first_step": 5, '
            '"resumed_from": 5, "param_digest": "b"}\n'
            "segment 1: the training step ended with status 0 (10:01:09)\n")
    first, second = batch.segments(text)
    assert (first["stop"], first["status"], first["last_step"]) == ("SIGUSR1", 75, 5)
    assert (second["stop"], second["resumed_from"], second["param_digest"]) == ("completed", 5, "b")


def test_no_slurm_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))            # no sbatch anywhere
    with pytest.raises(SlurmError, match=r"^no Slurm here \(no `sbatch` on PATH\)") as info:
        batch.submit_requeue(tmp_path)
    assert "\n" not in str(info.value)


def test_start_waits_for_each_pid_file(tmp_path):
    """slurm_local.sh's wait_pidfile: a daemon that writes its pid file late is waited for (issue
    #40: `cat: .../slurmd-node1.pid: No such file or directory` under load); none within the timeout
    is one clear error; every daemon start goes through it."""
    text = SCRIPT.read_text()
    fn = re.search(r"^wait_pidfile\(\) \{.*?^\}", text, re.S | re.M).group(0)
    pidfile = tmp_path / "d.pid"
    late = (f'die() {{ echo "ERROR: $*" >&2; exit 1; }}\nTIMEOUT=20\n{fn}\n'
            f'(sleep 1; : > {pidfile}; sleep 0.5; echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}) &\n'
            f'wait_pidfile {pidfile} daemon log && echo "waited for $WAITED_PID"\n')
    r = subprocess.run(["bash", "-c", late], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and re.fullmatch(r"waited for \d+", r.stdout.strip()), r.stdout + r.stderr
    never = f'die() {{ echo "ERROR: $*" >&2; exit 1; }}\nTIMEOUT=1\n{fn}\nwait_pidfile {pidfile}.no slurmd L\n'
    r = subprocess.run(["bash", "-c", never], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"slurmd wrote no pid file ({pidfile}.no) within 1 s: see L" in r.stderr
    for daemon in ("slurmctld.pid", "slurmd.pid", "slurmd-$name.pid", "sshd-$name.pid",
                   "/run/munge/munged.pid"):
        assert re.search(rf"wait_pidfile \S*{re.escape(daemon)}", text), daemon
    # no other read of a daemon's pid file at start: cmd_start and start_node read only through it
    starts = re.findall(r"^(?:cmd_start|start_node|start_munge)\(\) \{.*?^\}", text, re.S | re.M)
    assert len(starts) == 3 and not any(re.search(r"cat [^|]*\.pid", s) for s in starts)


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    """No Slurm: 2 local ranks, SIGUSR1 to rank 1 only. The all-reduce of the flag makes rank 0
    stop after the same step; both save it (one complete checkpoint) and exit 75."""
    import json
    import signal
    import sys
    from dltutor.core import course, dist
    lab, port = course.lab("10_checkpoint/train.py"), dist.free_port()
    procs = []
    try:
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(
                [sys.executable, "-u", str(lab), "--tiny", "--steps", "400", "--pace", "0.05",
                 "--save-on-signal", "--ckpt-dir", str(tmp_path / "c")], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env))
        for line in procs[0].stdout:        # training has started (rank 0 says it is paced)
            if "each step paced" in line:
                break
        time.sleep(1.0)
        procs[1].send_signal(signal.SIGUSR1)
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
    metrics = [json.loads(re.search(r"DLTUTOR_METRICS (\{.*\})", o).group(1)) for o in outs]
    assert [p.returncode for p in procs] == [75, 75], outs
    assert [m["signal_received"] for m in metrics] == [None, "SIGUSR1"]     # only rank 1 got it
    assert [m["stop_signal"] for m in metrics] == ["SIGUSR1", "SIGUSR1"]    # both stopped on it
    step = metrics[0]["signal_stop_step"]
    assert metrics[1]["signal_stop_step"] == step == metrics[0]["steps"] < 400
    assert (tmp_path / "c" / f"step-{step:06d}" / ".metadata").is_file()
