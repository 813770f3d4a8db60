"""Worker for tests/test_experts.py: expert parallelism against the one-process MoE, fp64, on
whatever world size it was launched with (dltutor.experts.exactness: the cases the lab's --check
runs too). Then two mutants of parallel.py (the combine puts rows back in the wrong order; the
dispatch's split sizes swapped) run the same case, to show the comparison catches them."""
import torch.distributed as dist

from dltutor.core import dist as ddist
from dltutor.experts import exactness, parallel

compare = exactness.compare


def mutant(name, rank, world):
    """The same case with one part of parallel.py broken; the error, or what was raised."""
    keep = parallel.dispatch, parallel.unpermute
    if name == "combine_order":     # rows put back as if they came back in token order
        parallel.unpermute = lambda x, token, w, back: keep[1](x, token.sort().values, w, back)
    else:                           # the dispatch's split sizes exchanged the wrong way
        parallel.dispatch = lambda rows, sent, received, g: keep[0](rows, received, sent, g)
    try:
        r = compare(rank, world, 2, None, seed=3)
        return dict(name=name, raised="", out_err=r["out_err"], dx_err=r["dx_err"])
    except RuntimeError as e:
        return dict(name=name, raised=str(e).splitlines()[0], out_err=float("inf"), dx_err=float("inf"))
    finally:
        parallel.dispatch, parallel.unpermute = keep


def main():
    with ddist.session() as ctx:
        rank, world = ctx.rank, ctx.world_size
        cases = exactness.cases(rank, world)
        dist.barrier()
        mutants = [mutant(n, rank, world) for n in ("combine_order", "splits_swapped")] \
            if world == 2 else []
        ddist.report(cases=cases, mutants=mutants)


if __name__ == "__main__":
    main()
