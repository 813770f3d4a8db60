"""A DeepSpeed op that is not built yet is compiled on first use, for minutes, in silence (seen in
notebook 04 when two checkouts shared one cache): lab 04 first says which ops it will compile and
where (dltutor.core.engines.build_notice, from the ops its config loads: bert_lab.ops_used)."""
import json
import shutil
from pathlib import Path

from dltutor.core import engines
from dltutor.zero import bert_lab

CONFIGS = Path(__file__).resolve().parents[1] / "course/labs/04_deepspeed/configs"


def test_the_ops_a_config_loads():
    cfg = lambda name: json.loads((CONFIGS / name).read_text())  # noqa: E731
    assert bert_lab.ops_used(cfg("zero2.json")) == ["deepspeed_shm_comm"]
    offload = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    assert bert_lab.ops_used(offload) == ["deepspeed_shm_comm", "cpu_adam"]
    nvme = {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"},
                                  "offload_optimizer": {"device": "nvme"}}}
    assert bert_lab.ops_used(nvme) == ["deepspeed_shm_comm", "cpu_adam", "async_io", "pin_memory"]


def test_an_op_not_built_is_announced_with_the_folder_and_a_built_one_is_not(tmp_path, monkeypatch):
    engines.apply_engine_env()
    built = engines.extensions_dir()
    assert engines.build_notice(list(engines.DEEPSPEED_OPS)) is None, "the set-up built every op"
    mine = tmp_path / "ext"
    shutil.copytree(built, mine, symlinks=True, ignore=shutil.ignore_patterns("lock"))
    for so in (mine / "cpu_adam").glob("cpu_adam*.so"):
        so.unlink()
    monkeypatch.setattr(engines, "extensions_dir", lambda: mine)
    assert engines.build_notice(["deepspeed_shm_comm"]) is None
    assert engines.build_notice(["deepspeed_shm_comm", "cpu_adam"]) == (
        f"[deepspeed] compiling op(s) cpu_adam for this environment before training (not built in "
        f"{mine}): this can take minutes, once; {engines.WARM_FIX}")


def test_lab_04_says_so_before_deepspeed_compiles(tmp_path):
    """For real: the shared-memory op's library removed from a copy of the built folder (its object
    files kept, so DeepSpeed relinks it in seconds); the lab's notice comes before DeepSpeed's build."""
    import os
    import subprocess
    import sys
    engines.apply_engine_env()
    mine = tmp_path / "ext"
    shutil.copytree(engines.extensions_dir(), mine, symlinks=True, ignore=shutil.ignore_patterns("lock"))
    for so in (mine / "deepspeed_shm_comm").glob("*.so"):
        so.unlink()
    lab = CONFIGS.parent / "train_bert_ds.py"
    out = subprocess.run([sys.executable, str(lab), "--tiny", "--deepspeed_config",
                          str(CONFIGS / "zero2.json")], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=600,   # one stream, in order
                         env={**os.environ, "TORCH_EXTENSIONS_DIR": str(mine), "PYTHONUNBUFFERED": "1"})
    text = out.stdout
    assert out.returncode == 0, text[-3000:]
    notice = text.index(f"[deepspeed] compiling op(s) deepspeed_shm_comm for this environment "
                        f"before training (not built in {mine})")
    assert notice < text.index("deepspeed_shm_comm_op built successfully"), text[-3000:]
    assert list((mine / "deepspeed_shm_comm").glob("*.so")), "DeepSpeed built the op"


NO_LIBAIO = """
import runpy, sys
from deepspeed.ops.op_builder.builder import OpBuilder
from deepspeed.ops.op_builder.cpu.async_io import AsyncIOBuilder
AsyncIOBuilder.is_compatible = lambda self, verbose=False: False   # as on a node without libaio
built = []
def jit_load(self, verbose=True):
    built.append(self.NAME)
    raise RuntimeError("compiled " + self.NAME)
OpBuilder.jit_load = jit_load
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_nvme_offload_without_libaio_is_one_clear_error_before_any_compile(tmp_path):
    """Found on a GPU node (notebook 04, NVMe offload on one rank under 320 MiB, a site Python
    without libaio): DeepSpeed's NVMe path loads async_io even when it is incompatible, compiling
    pin_memory first, inside the budgeted rank: "virtual memory exhausted". Lab 04 now refuses
    such a run in one line that says what to install, before DeepSpeed compiles or the budget
    applies. For real: the lab, with DeepSpeed's async_io check answering "no libaio" and any
    compile refused."""
    import os
    import subprocess
    import sys
    wrapper = tmp_path / "no_libaio.py"
    wrapper.write_text(NO_LIBAIO)
    lab = CONFIGS.parent / "train_bert_ds.py"
    out = subprocess.run([sys.executable, str(wrapper), str(lab), "--tiny", "--mem-budget-mb", "320",
                          "--deepspeed_config", str(CONFIGS / "zero3_offload_nvme.json"),
                          "--nvme_path", str(tmp_path / "nvme")], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=300,
                         env={**os.environ, "PYTHONUNBUFFERED": "1", "DS_ACCELERATOR": "cpu"})
    assert out.returncode == 2, out.stdout[-3000:]
    assert "NVMe offload needs DeepSpeed's async_io op" in out.stdout and "libaio-dev" in out.stdout
    assert "compiled" not in out.stdout and "Traceback" not in out.stdout, out.stdout[-2000:]
    assert "zero3_offload_cpu.json" in out.stdout
