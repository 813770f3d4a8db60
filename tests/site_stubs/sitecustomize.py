"""What each Python process of a site dry-run job ran with (tests/site_dry_run.py).

The test puts a copy of this file, with a names.json beside it, in a folder of the job's own and that
folder on PYTHONPATH, which reaches every process of the job: srun's tasks, torchrun's and
DeepSpeed's children, horovodrun's ssh-started ranks (horovodrun passes the environment on) and
DeepSpeed's pdsh-started ones (the runner exports every PYTHON* variable). Python imports
sitecustomize at start-up, so each process appends one JSON line to processes.jsonl beside it:
its command line, host, interpreter (sys.prefix and its real path), the launchers' rank variables,
CUDA_VISIBLE_DEVICES, the variables named in names.json and its whole environment. `kind` is "rank"
for a process that runs a script (not -c or -m) with a rank variable set, else "process" (the job's
import check, torchrun's agent, the launchers). Standard library only: dltutor is not imported here.
"""
import json
import os
import socket
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_RANK_VARS = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "SLURM_PROCID")
_IDS = _RANK_VARS + ("LOCAL_RANK", "WORLD_SIZE", "PMI_SIZE", "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID",
                     "PALS_NODEID", "HOROVOD_LOCAL_RANK", "HOROVOD_SIZE", "SLURM_LOCALID",
                     "SLURM_NODEID", "SLURM_STEP_ID")
_VALUE_OPTIONS = ("-W", "-X", "-Q")   # interpreter options that take the next argument


def _command_line() -> list:
    with open("/proc/self/cmdline", "rb") as fh:
        return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]


def _script(argv: list):
    """The script a `python [options] script args` command line runs; None for -c, -m or none."""
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-c", "-m"):
            return None
        if arg in _VALUE_OPTIONS:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def _record() -> None:
    argv = _command_line()
    script = _script(argv)
    env = dict(os.environ)
    with open(os.path.join(_HERE, "names.json")) as fh:
        names = json.load(fh)
    rank = script is not None and any(v in env for v in _RANK_VARS)
    line = json.dumps(dict(
        kind="rank" if rank else "process", argv=argv, script=script, host=socket.gethostname(),
        pid=os.getpid(), prefix=sys.prefix, real_prefix=os.path.realpath(sys.prefix),
        executable=sys.executable, ids={v: env[v] for v in _IDS if v in env},
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        exports={n: env.get(n) for n in names}, environ=env)) + "\n"
    fd = os.open(os.path.join(_HERE, "processes.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:   # one write per line: the job's processes append to the same file at once
        os.write(fd, line.encode())
    finally:
        os.close(fd)


_record()
