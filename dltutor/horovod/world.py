"""Is Horovod's world the one the launcher started? (the srun form with a Gloo-only Horovod)

The course's Horovod is built with Gloo and without MPI (`hvd.mpi_built()` is False). Such a
Horovod learns its peers only from horovodrun: horovodrun runs an HTTP rendezvous server
(horovod.runner.http.http_server.RendezvousServer, told the host/slot plan) and hands every rank
HOROVOD_GLOO_RENDEZVOUS_ADDR / _PORT, HOROVOD_CONTROLLER=gloo and its HOROVOD_RANK / SIZE /
LOCAL_RANK / LOCAL_SIZE / CROSS_RANK / CROSS_SIZE / HOSTNAME. Started by srun (or mpirun) instead,
a task has none of these and Horovod 0.28.1 does not read Slurm's (or MPI's) variables, so
`hvd.init()` succeeds and each task trains alone in a world of one: `srun -n 2` on node1 and node2
printed "Number of CPUs: 1" twice, two unrelated runs, and ended COMPLETED. `check_world_size`
turns that into one error naming what to do. (A Horovod built with MPI reads its ranks from MPI,
and srun works with it where Slurm's PMI matches that MPI.)
"""
from __future__ import annotations

from dltutor.core import dist


def world_mismatch(horovod_size: int, environ=None) -> str | None:
    """The error text when a launcher started more tasks than Horovod sees, else None."""
    info = dist.detect(environ)
    if info["launcher"] in ("single", "horovod") or info["world_size"] <= horovod_size:
        return None
    launcher = {"slurm": "srun", "mpi": "mpirun", "pbs": "mpiexec"}.get(info["launcher"], info["launcher"])
    return (f"rank {info['rank']}: {launcher} started {info['world_size']} tasks but Horovod "
            f"sees a world of {horovod_size}: this Horovod has Gloo and no MPI, and without "
            "horovodrun's rendezvous every task trains alone. Start the ranks with horovodrun "
            "(`horovodrun -np N -H node1:K,node2:K --gloo python ...`; a job script from "
            "render_job(site, lab 03) already does), or use a Horovod built with MPI.")


def check_world_size(horovod_size: int, environ=None) -> None:
    """After hvd.init(): exit with `world_mismatch`'s message when Horovod's world is too small."""
    message = world_mismatch(horovod_size, environ)
    if message:
        raise SystemExit(message)
