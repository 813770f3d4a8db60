"""Before a rank joins its process group: can the rendezvous (MASTER_ADDR:MASTER_PORT) work at all?

Two multi-node mistakes otherwise cost minutes and end in a C++ stack trace: a MASTER_ADDR that a
node cannot resolve (a site's address suffix such as JSC's "i" added to a name that has no such
form) makes every rank retry its connection until the rendezvous timeout; a MASTER_PORT that
something else already listens on makes rank 0 fail to host the store while the other ranks knock
at the wrong door. `check(info)` (called by dltutor.core.dist.init) turns each into one error that
names the rank, its host, the address or port, and what to change in the job script.
"""
from __future__ import annotations

import os
import socket

from dltutor.core.hosts import first_host

# Launchers whose rank 0 hosts the rendezvous store on MASTER_PORT itself (env:// in
# torch.distributed). Under torchrun the agent holds that port already: no check there.
RANK0_HOSTS_STORE = ("slurm", "mpi", "pbs")


class RendezvousError(SystemExit):
    """The rendezvous cannot work: what is wrong, where, and what to do. A SystemExit, as a rank's
    bad input is (dltutor.horovod.world): the rank exits 1 with that one line, no stack trace."""


def _where(info) -> str:
    return f"{info.get('who') or 'rank ' + str(info['rank'])} on {socket.gethostname()}"


def _job_first_node(environ) -> str | None:
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    try:
        return first_host(nodelist) if nodelist else None
    except ValueError:
        return None


def unresolved_message(info, why: str, environ=None) -> str:
    """The message for a MASTER_ADDR this node cannot resolve (`why`: the resolver's words)."""
    addr, port = info["master_addr"], info["master_port"]
    first = _job_first_node(os.environ if environ is None else environ)
    if first and addr != first and addr.startswith(first):
        hint = (f"It is the job's first node '{first}' plus '{addr[len(first):]}': check the site "
                "profile's master_addr_suffix (course/labs/sites/<site>.toml), which the job script "
                f"appends to MASTER_ADDR; `getent hosts {addr}` on a node must answer.")
    else:
        hint = (f"Set MASTER_ADDR in the job script to a name every node resolves "
                f"(`getent hosts {addr}` on a node must answer), e.g. the job's first node.")
    return (f"{_where(info)}: MASTER_ADDR '{addr}' does not resolve ({why}), so no rank can reach "
            f"the rendezvous at {addr}:{port}. {hint}")


def port_taken_message(info) -> str:
    """The message for a MASTER_PORT that something else already listens on (rank 0's host)."""
    port, host = info["master_port"], socket.gethostname()
    return (f"{_where(info)}: MASTER_PORT {port} is already in use on {host}: something else listens "
            f"there (another job's rendezvous, or a process left over), so "
            f"{info.get('who') or 'rank 0'} cannot host the rendezvous at {info['master_addr']}:{port}. "
            f"Give the job another MASTER_PORT (the job "
            f"script sets it; the course's template takes 20000 + SLURM_JOB_ID % 10000); "
            f"`ss -ltnp 'sport = :{port}'` on {host} shows who holds it.")


def resolves(addr: str) -> str | None:
    """None when `addr` resolves here, else the resolver's reason."""
    try:
        socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
        return None
    except (socket.gaierror, UnicodeError) as exc:
        return getattr(exc, "strerror", None) or str(exc)


def port_in_use(port: int) -> bool:
    """True when a socket already listens on `port` (on any address of this host): binding the
    wildcard address with SO_REUSEADDR, as the rendezvous store does, fails."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", int(port)))
        except OSError:
            return True
    return False


def check(info, hosts_store: bool | None = None) -> None:
    """RendezvousError when MASTER_ADDR does not resolve on this node, or when this process hosts the
    store (default: rank 0 of a launcher whose rank 0 does) and MASTER_PORT is already taken here."""
    why = resolves(info["master_addr"])
    if why:
        raise RendezvousError(unresolved_message(info, why))
    if hosts_store is None:
        hosts_store = info["rank"] == 0 and info["launcher"] in RANK0_HOSTS_STORE
    if hosts_store and port_in_use(info["master_port"]):
        raise RendezvousError(port_taken_message(info))


def main(argv=None) -> int:
    """`python -m dltutor.core.rendezvous --node-rank N`: the same checks for a launcher's agent on
    one node before it starts (torchrun's static rendezvous: node rank 0 hosts the store on
    MASTER_PORT), from MASTER_ADDR / MASTER_PORT; exits 1 with the message, 0 and silent when fine."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m dltutor.core.rendezvous", description=main.__doc__)
    p.add_argument("--node-rank", type=int, default=0,
                   help="this node's rank; node rank 0 hosts the store (default: 0)")
    a = p.parse_args(argv)
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not (port or "").isdigit():
        raise RendezvousError(f"node rank {a.node_rank} on {socket.gethostname()}: MASTER_ADDR and "
                              "MASTER_PORT must be exported before the launcher starts (the job "
                              "script sets them)")
    info = dict(rank=a.node_rank, who=f"the launcher of node rank {a.node_rank}", launcher="agent",
                master_addr=addr, master_port=int(port))
    check(info, hosts_store=a.node_rank == 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
