"""`python -m dltutor ...`: the doctor, data staging and the Jupyter kernel, from a shell.

    python -m dltutor doctor                 # the environment table (exit 1 if a row is a problem)
    python -m dltutor data stage --from DIR  # copy a pre-staged CIFAR-10 into the data dir
    python -m dltutor data where             # print the data dir
    python -m dltutor kernel install         # register this python as the Jupyter kernel `dltutor`
"""
from __future__ import annotations

import argparse
import subprocess
import sys

KERNEL_NAME = "dltutor"


def _doctor(args) -> int:
    from dltutor.envcheck import PROBLEM, doctor
    rows = doctor(engines_too=not args.no_engines)
    return 1 if any(r.status == PROBLEM for r in rows) else 0


def _data(args) -> int:
    from dltutor import env
    if args.action == "where":
        print(env.data_dir())
        return 0
    from dltutor import data
    path = data.stage_cifar10(args.src, dest=args.dest)
    print(f"CIFAR-10 staged at {path}")
    return 0


def kernel_install(name: str = KERNEL_NAME, scope: str = "user", display_name: str | None = None) -> list[str]:
    """Register the running python as a Jupyter kernel; returns the command it ran."""
    display = display_name or f"Python ({name})"
    cmd = [sys.executable, "-m", "ipykernel", "install", f"--name={name}", f"--display-name={display}"]
    if scope == "user":
        cmd.append("--user")
    elif scope == "sys-prefix":
        cmd.append("--sys-prefix")
    else:
        cmd.append(f"--prefix={scope}")
    subprocess.run(cmd, check=True)
    return cmd


def _kernel(args) -> int:
    kernel_install(args.name, args.scope, args.display_name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dltutor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="print the environment table")
    d.add_argument("--no-engines", action="store_true", help="skip the Horovod/DeepSpeed checks")
    d.set_defaults(func=_doctor)

    data = sub.add_parser("data", help="stage or locate course data")
    data.add_argument("action", choices=["stage", "where"])
    data.add_argument("--from", dest="src", help="a directory holding cifar-10-batches-py or "
                      "cifar-10-python.tar.gz (e.g. a shared copy on the cluster)")
    data.add_argument("--dest", default=None, help="data dir (default: $DLTUTOR_DATA or ~/.cache/dltutor/data)")
    data.set_defaults(func=_data)

    k = sub.add_parser("kernel", help="register this python as a Jupyter kernel")
    k.add_argument("action", choices=["install"])
    k.add_argument("--name", default=KERNEL_NAME)
    k.add_argument("--display-name", default=None)
    k.add_argument("--scope", default="user",
                   help="user (~/.local/share/jupyter), sys-prefix (this env) or a prefix path")
    k.set_defaults(func=_kernel)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "data" and args.action == "stage" and not args.src:
        build_parser().error("data stage needs --from DIR (where the shared CIFAR-10 copy is)")
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
