"""The engines are really installed and really work on 2 local ranks (CPU, Gloo).

- Horovod: `horovodrun --check-build` lists PyTorch and Gloo; a 2-rank all-reduce under
  `horovodrun -np 2 -H localhost:2 --gloo` gives the exact sum and average on every rank.
- DeepSpeed: a 2-rank ZeRO-2 run (torchrun, gloo, DS_ACCELERATOR=cpu) with the CPU Adam op:
  the loss goes down and both ranks end with identical parameters.

No skips: a missing engine fails with the command that installs it (scripts/build_horovod.sh,
scripts/warm_deepspeed.py, both run by `make setup`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dltutor.core import engines
from dltutor.core.env import extensions_dir
from dltutor.core.dist import free_port

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TIMEOUT = 240          # generous: the 2-core CI box is shared; a healthy run takes well under 60 s


def _env() -> dict:
    env = dict(os.environ)
    env.update(engines.engine_env(nthreads=1))          # DS_ACCELERATOR, TORCH_EXTENSIONS_DIR
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(HERE.parent)] + [p for p in [env.get("PYTHONPATH")] if p]))
    return env


def _run(cmd: list[str], timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    """Run `cmd` in its own session; on timeout kill it and every process it started."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(), cwd=HERE.parent, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n--- output ---\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def _kill_tree(proc: subprocess.Popen) -> None:
    """horovodrun starts its ranks in new sessions, so a process-group kill is not enough."""
    import psutil
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def _results(output: str, tag: str) -> list[dict]:
    rows = [json.loads(line.split(tag, 1)[1]) for line in output.splitlines() if tag in line]
    return sorted(rows, key=lambda r: r["rank"])


def _horovodrun() -> str:
    info = engines.horovod_info()
    exe = BIN / "horovodrun"
    if not info["importable"] or not exe.exists():
        extra = f" ({info['details']})" if info["details"] else ""
        pytest.fail(f"{info['fix'] or 'horovodrun is missing: reinstall Horovod'}{extra}")
    return str(exe)


def test_horovod_check_build_lists_pytorch_and_gloo():
    out = _run([_horovodrun(), "--check-build"], timeout=120)
    assert out.returncode == 0, out.stdout
    assert "[X] PyTorch" in out.stdout, out.stdout
    # "[X] Gloo" appears under controllers and under tensor operations
    assert out.stdout.count("[X] Gloo") == 2, out.stdout


def test_horovod_two_rank_allreduce():
    # All hosts local -> horovodrun picks the interface with 127.0.0.1 (lo) and a free port for
    # its rendezvous server by itself; no --network-interfaces needed.
    cmd = [_horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", "--gloo-timeout-seconds", "60",
           "--start-timeout", "60", sys.executable, str(HERE / "engines_hvd_worker.py")]
    out = _run(cmd)
    assert out.returncode == 0, f"horovodrun failed (rc={out.returncode}):\n{out.stdout[-4000:]}"
    rows = _results(out.stdout, "HVD_RESULT ")
    assert [r["rank"] for r in rows] == [0, 1], out.stdout
    for r in rows:                                  # ranks contribute 1*v and 2*v, v = [1, 2, 3, 4]
        assert r["size"] == 2 and r["gloo"] is True
        assert r["sum"] == [3.0, 6.0, 9.0, 12.0]
        assert r["avg"] == [1.5, 3.0, 4.5, 6.0]


def test_deepspeed_zero2_two_ranks_cpu_adam():
    info = engines.deepspeed_info()
    assert info["importable"], f"DeepSpeed is not usable here ({info['details']}): {info['fix']}"
    # cpu_adam: the ZeRO-Offload optimizer; deepspeed_shm_comm: loaded by init_distributed on CPU
    missing = [op for op in ("cpu_adam", "deepspeed_shm_comm")
               if info["details"].get(op) not in ("built", None)]
    if missing:
        pytest.fail(f"DeepSpeed ops {missing} are not prebuilt in {extensions_dir()} "
                    f"(the test would spend minutes compiling them): {engines.WARM_FIX}")
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / "engines_ds_worker.py")]
    out = _run(cmd)
    assert out.returncode == 0, f"torchrun failed (rc={out.returncode}):\n{out.stdout[-4000:]}"
    rows = _results(out.stdout, "DS_RESULT ")
    assert [r["rank"] for r in rows] == [0, 1], out.stdout
    for r in rows:
        assert r["zero_stage"] == 2 and r["world"] == 2
        assert r["optimizer"] == "DeepSpeedCPUAdam", r
        assert r["losses"][-1] < 0.8 * r["losses"][0], f"loss did not go down on rank {r['rank']}: {r}"
        assert r["params_equal_rank0"], f"rank {r['rank']} parameters differ from rank 0"
    assert rows[0]["checksum"] == rows[1]["checksum"]
    # the ranks trained on different data, so identical parameters come from the ZeRO exchange
    assert rows[0]["losses"][0] != rows[1]["losses"][0]


LOAD_OP = """
import sys, shutil, dltutor
sys.path.insert(0, {scripts!r})
import warm_deepspeed as w
w.setup_env()
ok, secs, msg = w.warm("deepspeed_shm_comm")
print("NINJA", shutil.which("ninja"), ok, msg)
"""


def test_deepspeed_ops_are_not_rebuilt_whichever_ninja_the_shell_finds_first():
    """Debian's ninja 1.11 first on PATH (a shell, a hub, `make test`) or pip's 1.13 (a launch that
    puts the venv's bin first): the pre-built op loads as it is. With two ninjas taking turns,
    every DeepSpeed process compiled it again (30-50 s): notebook 04 went from 65 to 117 s."""
    so = extensions_dir() / "deepspeed_shm_comm" / "deepspeed_shm_comm.so"
    assert so.is_file(), f"{so} missing: {engines.WARM_FIX}"
    before = so.stat().st_mtime_ns
    code = LOAD_OP.format(scripts=str(HERE.parent / "scripts"))
    for path in ("/usr/bin:/bin", f"{BIN}:/usr/bin:/bin", "/usr/bin:/bin"):
        env = {**os.environ, "PATH": path, "DS_ACCELERATOR": "cpu"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=TIMEOUT)
        assert out.returncode == 0 and "NINJA" in out.stdout, out.stderr[-2000:]
        assert out.stdout.split("NINJA ")[1].split()[0] == str(BIN / "ninja"), out.stdout
        assert so.stat().st_mtime_ns == before, f"the op was compiled again with PATH={path}"


def test_the_environments_bin_goes_first_only_when_it_has_ninja(tmp_path, monkeypatch):
    from dltutor.core.env import path_with_env_bin
    fake = tmp_path / "venv" / "bin"
    fake.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(fake / "python"))
    assert path_with_env_bin("/usr/bin:/bin") == "/usr/bin:/bin"
    (fake / "ninja").write_text("")
    assert path_with_env_bin(f"/usr/bin:{fake}:/bin") == f"{fake}:/usr/bin:/bin"


def test_setup_skips_the_op_warm_up_only_while_its_record_matches(tmp_path, monkeypatch):
    """`make setup`'s no-op run (warm_deepspeed.py --if-changed) imports nothing while the record
    of the last warm-up matches this environment and every op's library is there; any change
    (another accelerator, a GPU, a missing library) warms up again."""
    as_setup = {k: v for k, v in os.environ.items()   # setup's environment: no engine variables
                if k not in ("DS_ACCELERATOR", "TORCH_CUDA_ARCH_LIST", "TORCH_EXTENSIONS_DIR")}
    out = subprocess.run([sys.executable, str(HERE.parent / "scripts" / "warm_deepspeed.py"),
                          "--if-changed"], capture_output=True, text=True, timeout=TIMEOUT,
                         env=as_setup)
    assert out.returncode == 0 and "up to date" in out.stdout, out.stdout + out.stderr[-2000:]
    sys.path.insert(0, str(HERE.parent / "scripts"))
    import warm_deepspeed as w
    ops = ["cpu_adam", "deepspeed_shm_comm"]
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    for op in ops:
        (tmp_path / op).mkdir()
        (tmp_path / op / f"{op}.so").write_text("")
    assert not w.up_to_date(ops)                              # never warmed here: no record
    w.record_path().write_text(w.warm_key(ops))
    assert w.up_to_date(ops)
    assert not w.up_to_date(ops + ["async_io"])               # another set of ops
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    assert not w.up_to_date(ops)                              # another accelerator
    monkeypatch.delenv("DS_ACCELERATOR")
    (tmp_path / "cpu_adam" / "cpu_adam.so").unlink()
    assert not w.up_to_date(ops)                              # a library gone
