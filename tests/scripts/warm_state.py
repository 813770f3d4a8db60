"""A rank that changes global state, or reports what a rank sees: for tests/test_warm.py.

  python -c "from dltutor.launch.run import launch; launch('tests/scripts/warm_state.py', 2, ['--mode', 'inspect'])"

Modes: pollute (change the environment, sys.modules, sys.path, a dltutor module and torch's
threads, start a thread), inspect (report what this rank sees of all that and of its process),
raise (--rank raises inside a function), exit3 (--rank calls sys.exit(3)), thread (a non-daemon
thread reports after the script's last line: the interpreter waits for it at exit).
"""
import argparse
import os
import sys
import threading
import time

import torch

from dltutor.core import dist


def fail_inside_a_function(rank):
    raise ValueError(f"rank {rank} raises on purpose")


p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
p.add_argument("--mode", choices=["pollute", "inspect", "raise", "exit3", "thread"], default="inspect")
p.add_argument("--rank", type=int, default=1, help="the rank that raises or exits with 3")
a = p.parse_args()
rank = dist.detect()["rank"]

if a.mode == "pollute":
    os.environ["WARM_LEAK"] = "1"
    import xml.dom.minidom  # noqa: F401  (a module nobody preloads)
    dist.WARM_LEAK = True
    sys.path.append("/warm-leak")
    torch.set_num_threads(3)
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    dist.report(polluted=True)
elif a.mode == "inspect":
    with open("/proc/self/environ", "rb") as fh:
        block = dict(e.split(b"=", 1) for e in fh.read().split(b"\0") if b"=" in e)
    dist.report(leak_env="WARM_LEAK" in os.environ, leak_module="xml.dom.minidom" in sys.modules,
                leak_attr=hasattr(dist, "WARM_LEAK"), leak_path="/warm-leak" in sys.path,
                threads=threading.active_count(), name=__name__, argv=sys.argv[1:],
                cwd=os.getcwd(), path0=sys.path[0], stdin_is_null=os.path.samefile(
                    "/proc/self/fd/0", os.devnull), torch_threads=torch.get_num_threads(),
                proc_rank=block.get(b"RANK", b"").decode(),
                proc_tag=block.get(b"DLTUTOR_LAUNCH_ID", b"").decode(),
                env_tag=os.environ.get("DLTUTOR_LAUNCH_ID"), test_tag=block.get(b"TEST_TAG",
                                                                                 b"").decode())
elif a.mode == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), dist.report(thread_done=True))).start()
elif rank == a.rank and a.mode == "raise":
    fail_inside_a_function(rank)
elif rank == a.rank and a.mode == "exit3":
    sys.exit(3)
else:
    dist.report(ok=True)
