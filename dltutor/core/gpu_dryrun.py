"""A GPU dry run on a machine without a GPU: drive lab code as rank r of an NCCL job, on the CPU.

    with nccl_dry_run(world_size=2, rank=0, local_rank=0) as run:
        ctx = dltutor.core.dist.init()          # an NCCL "job": ctx.device == cuda:0
        x = torch.ones(8, device=ctx.device)    # a fake CUDA tensor: shape, dtype, device, no data
        torch.distributed.all_reduce(x)         # checked, recorded in run.calls, no data moves

What it checks, while the block runs:
- Devices of computations: with `fake=True` (the default) every new tensor is a FakeTensor
  (torch._subclasses.fake_tensor.FakeTensorMode), so `device="cuda"` works without a GPU and an op
  that mixes a CUDA tensor with a CPU one raises as it would on a GPU (0-dim CPU scalars mix, as
  there). Real tensors made before the block count as CPU tensors.
- Devices of communication: torch.distributed answers as rank `rank` of `world_size`; its
  collectives and point-to-point calls (all_reduce, all_gather(_into_tensor), broadcast, reduce,
  reduce_scatter(_tensor), all_to_all(_single), send/recv, isend/irecv, batch_isend_irecv; barrier
  is only recorded) check every tensor they are handed and record the call in `run.calls`. With
  nccl each tensor must be a contiguous tensor on this rank's GPU cuda:<local_rank>, and that GPU
  must be the current one (torch.cuda.set_device); with gloo, CPU tensors (all_reduce and
  broadcast also take CUDA ones). Under nccl an isend and an irecv to the same peer in flight
  together, posted one by one, are refused: NCCL queues them in order and large paired messages
  can hang; batch them with batch_isend_irecv. init_process_group(backend) switches the backend
  the checks use (`backend` before that); DistributedDataParallel is a pass-through that checks
  where the module's parameters are and what `device_ids` says.
- torch.cuda says GPUs are there: is_available() True, device_count() `gpus`,
  get_device_capability() `capability` ((8, 0) A100, (7, 0) V100), is_bf16_supported() for it;
  set_device / current_device / synchronize keep note only. The launcher variables (RANK,
  LOCAL_RANK, WORLD_SIZE, ...) are those torchrun would set, so dltutor.core.dist.init() joins
  the "job". Everything is put back on exit (patches, environment, thread count, dist's context).

What it cannot check: no kernel runs and no byte moves (no real CUDA, no real NCCL): collectives
are no-ops, only one rank is played, so hangs, timeouts, wrong sums, memory and NCCL's own settings
go unseen. Fake tensors have no values: `.item()`, `.tolist()`, `bool(t)`, `torch.allclose` raise
`NoValues`, so drive device-side code up to where it reads a number; backward on fake CUDA tensors
fails (autograd wants a CUDA context); a module built inside the block cannot be moved with .to()
(its fake parameters cannot be swapped): build it before. A bare 'cuda' in .to()/.cuda() means cuda:0 here (on a GPU,
the current device): name the index, as dltutor.core.device.device() does. DDP's own gradient
all-reduce is not run; calls through names bound before the block (`from torch.distributed import
all_reduce`) are not seen.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from unittest import mock

import torch
import torch.distributed as tdist
from torch._subclasses.fake_tensor import DataDependentOutputException as NoValues
from torch._subclasses.fake_tensor import FakeTensorMode

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single")
P2P = ("send", "recv", "isend", "irecv")
GLOO_TAKES_CUDA = ("all_reduce", "broadcast", "DistributedDataParallel")


class DryRunError(RuntimeError):
    """A call that would fail (or hang) on the GPU node."""


@dataclass(frozen=True)
class Call:
    name: str                    # 'all_reduce', 'isend', 'batch_isend_irecv', 'init_process_group', ...
    devices: tuple = ()          # devices of the tensors handed over, as strings
    peer: int | None = None      # send/recv partner
    detail: str = ""             # backend, reduce op, or the ops of a batch ('isend->1 irecv<-1')


class _Work:
    """What an async call returns: wait() always succeeds at once."""

    def __init__(self, run=None, key=None):
        self._run, self._key = run, key

    def wait(self, timeout=None):
        if self._run is not None:
            self._run.in_flight.discard(self._key)
        return True

    is_completed = staticmethod(lambda: True)


class _P2POp:
    """Stands for torch.distributed.P2POp (the real one needs a real process group)."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (tdist.isend, tdist.irecv):
            raise ValueError("P2POp: op must be torch.distributed.isend or irecv")
        self.op, self.tensor, self.group, self.tag = op, tensor, group, tag
        self.peer = peer if peer is not None else group_peer


class _FakeMode(FakeTensorMode):
    """FakeTensorMode that knows torch.cuda.is_available() is pretend: no real CUDA call, ever."""

    @property
    def avoid_device_init(self) -> bool:
        return True


def _tensors(values):
    """Every tensor in `values`, looking inside lists and tuples (all_gather's tensor_list)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


@dataclass
class DryRun:
    """The state of one dry run: who we pretend to be and what was called (`calls`)."""
    world_size: int = 2
    rank: int = 0
    local_rank: int = 0
    backend: str = "nccl"
    capability: tuple = (8, 0)
    gpus: int = 2
    current: int = 0                      # torch.cuda.current_device()
    initialized: bool = False
    calls: list = field(default_factory=list)
    in_flight: set = field(default_factory=set)   # (kind, peer) of unwaited isend/irecv

    @property
    def device(self) -> torch.device:
        """The device this rank's tensors must be on for the current backend."""
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def names(self) -> list[str]:
        return [c.name for c in self.calls]  # the calls' names, in order

    def check(self, name: str, tensors) -> tuple:
        """Raise DryRunError unless every tensor may be handed to `name` under this backend."""
        tensors = list(tensors)
        for t in tensors:
            if self.backend == "nccl":
                if t.device != self.device:
                    raise DryRunError(
                        f"{name}: a tensor on {t.device}, but NCCL rank {self.rank} moves only "
                        f"tensors on its own GPU {self.device} (make it there, or .to(device))")
                if self.current != self.local_rank:
                    raise DryRunError(
                        f"{name}: the current GPU is cuda:{self.current}, not {self.device}: call "
                        f"torch.cuda.set_device({self.device}) before the first NCCL call")
            elif t.device.type != "cpu" and name not in GLOO_TAKES_CUDA:
                raise DryRunError(f"{name}: a tensor on {t.device}; gloo {name} needs CPU tensors")
            if name != "DistributedDataParallel" and not t.is_contiguous():
                raise DryRunError(f"{name}: a non-contiguous tensor (call .contiguous() first)")
        return tuple(str(t.device) for t in tensors)

    # ---------------------------------------------------------------- torch.distributed stand-ins
    def _collective(self, name):
        def call(*args, **kwargs):
            devices = self.check(name, _tensors(list(args) + list(kwargs.values())))
            op = kwargs.get("op", next((a for a in args if isinstance(a, tdist.ReduceOp.RedOpType)),
                                       tdist.ReduceOp.SUM if "reduce" in name else None))
            self.calls.append(Call(name, devices, detail=str(op).split(".")[-1] if op else ""))
            return _Work() if kwargs.get("async_op") else None
        return call

    def _p2p(self, name):
        def call(tensor, peer=None, group=None, tag=0, **kwargs):
            peer = peer if peer is not None else kwargs.get("group_dst", kwargs.get("group_src"))
            devices = self.check(name, [tensor])
            other = ("irecv" if name == "isend" else "isend", peer)
            if name.startswith("i") and self.backend == "nccl" and other in self.in_flight:
                raise DryRunError(
                    f"{name} with rank {peer} while an {other[0]} with it is in flight, posted one "
                    "by one: under NCCL two ranks whose large sends wait for each other's receive "
                    "hang; post the pair together with torch.distributed.batch_isend_irecv")
            self.calls.append(Call(name, devices, peer=peer))
            if not name.startswith("i"):
                return None
            self.in_flight.add((name, peer))
            return _Work(self, (name, peer))
        return call

    def _batch(self, ops):
        if not ops or not all(isinstance(o, _P2POp) for o in ops):
            raise DryRunError("batch_isend_irecv: a non-empty list of torch.distributed.P2POp")
        devices = self.check("batch_isend_irecv", [o.tensor for o in ops])
        detail = " ".join(f"isend->{o.peer}" if o.op is tdist.isend else f"irecv<-{o.peer}"
                          for o in ops)
        self.calls.append(Call("batch_isend_irecv", devices, detail=detail))
        return [_Work()]

    def _init_process_group(self, backend=None, *args, rank=None, world_size=None, **kwargs):
        backend = str(backend or "nccl").lower()
        if (rank, world_size) not in ((None, None), (self.rank, self.world_size)):
            raise DryRunError(f"init_process_group(rank={rank}, world_size={world_size}), but this "
                              f"dry run is rank {self.rank} of {self.world_size}")
        if backend == "nccl" and self.current != self.local_rank:
            raise DryRunError(f"init_process_group('nccl') with cuda:{self.current} current: call "
                              f"torch.cuda.set_device({torch.device('cuda', self.local_rank)}) first")
        self.backend, self.initialized = backend, True
        self.calls.append(Call("init_process_group", detail=backend))

    def _destroy(self, *args, **kwargs):
        self.initialized = False
        self.calls.append(Call("destroy_process_group"))

    def _ddp_class(self):
        run = self

        class DistributedDataParallel(torch.nn.Module):
            """Pass-through stand-in for DDP: checks devices, averages nothing."""

            def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
                super().__init__()
                params = list(module.parameters())
                devices = run.check("DistributedDataParallel", params)
                if device_ids and any(p.device.type != "cuda" for p in params):
                    raise DryRunError("DistributedDataParallel: device_ids given for a CPU module "
                                      "(pass device_ids=None)")
                if device_ids and list(device_ids) != [run.local_rank]:
                    raise DryRunError(f"DistributedDataParallel: device_ids={list(device_ids)} on "
                                      f"local rank {run.local_rank}")
                run.calls.append(Call("DistributedDataParallel", tuple(sorted(set(devices)))))
                self.module = module

            def forward(self, *args, **kwargs):
                return self.module(*args, **kwargs)

            no_sync = staticmethod(contextlib.nullcontext)

            def register_comm_hook(self, state, hook):
                run.calls.append(Call("register_comm_hook", detail=getattr(hook, "__name__", "")))
        return DistributedDataParallel

    def patches(self) -> dict:
        """(object, attribute) -> stand-in, for every function the dry run replaces."""
        cuda, d = torch.cuda, tdist
        out = {(cuda, "is_available"): lambda: True, (cuda, "is_initialized"): lambda: True,
               (cuda, "device_count"): lambda: self.gpus, (cuda, "current_device"): lambda: self.current,
               (cuda, "get_device_capability"): lambda device=None: tuple(self.capability),
               (cuda, "is_bf16_supported"): lambda *a, **k: self.capability[0] >= 8,
               (cuda, "get_device_name"): lambda device=None: "dry-run GPU",
               (cuda, "set_device"): self._set_device,
               (cuda, "synchronize"): lambda device=None: self.calls.append(Call("synchronize")),
               (d, "is_available"): lambda: True, (d, "is_initialized"): lambda: self.initialized,
               (d, "init_process_group"): self._init_process_group,
               (d, "destroy_process_group"): self._destroy,
               (d, "get_rank"): lambda group=None: self.rank,
               (d, "get_world_size"): lambda group=None: self.world_size,
               (d, "get_backend"): lambda group=None: self.backend,
               (d, "get_global_rank"): lambda group, group_rank: group_rank,
               (d, "barrier"): lambda *a, **k: self.calls.append(Call("barrier")),
               (d, "batch_isend_irecv"): self._batch, (d, "P2POp"): _P2POp,
               (torch.nn.parallel, "DistributedDataParallel"): self._ddp_class()}
        out.update({(d, name): self._collective(name) for name in COLLECTIVES})
        out.update({(d, name): self._p2p(name) for name in P2P})
        return out

    def _set_device(self, device):
        index = device if isinstance(device, int) else torch.device(device).index
        self.current = 0 if index is None else index
        self.calls.append(Call("set_device", (f"cuda:{self.current}",)))


@contextlib.contextmanager
def nccl_dry_run(world_size: int = 2, rank: int = 0, local_rank: int | None = None,
                 capability: tuple = (8, 0), gpus: int | None = None, backend: str = "nccl",
                 fake: bool = True, launcher_env: bool = True):
    """Pretend, inside the block, to be rank `rank` of an NCCL job on a GPU node; yields a DryRun.

    `local_rank` defaults to `rank`; `gpus` (GPUs on the node) to max(2, local_rank + 1);
    `backend` is what the checks assume until code calls init_process_group; `fake=False` leaves
    tensors real (CPU only, e.g. for a --no-cuda run); `launcher_env` sets RANK, LOCAL_RANK,
    WORLD_SIZE, ... as torchrun does, else clears every launcher's variables (plain `python`).
    See the module doc.
    """
    from dltutor.core import dist as ddist
    local_rank = rank if local_rank is None else local_rank
    run = DryRun(world_size=world_size, rank=rank, local_rank=local_rank, backend=backend,
                 capability=tuple(capability), gpus=gpus or max(2, local_rank + 1))
    env = {"RANK": rank, "LOCAL_RANK": local_rank, "WORLD_SIZE": world_size,
           "LOCAL_WORLD_SIZE": min(world_size, run.gpus), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": 29500} if launcher_env else {}
    saved_ctx, threads = ddist._CTX, torch.get_num_threads()
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, {k: str(v) for k, v in env.items()}))
        for name in ddist.RANK_ENV if not launcher_env else ():
            os.environ.pop(name, None)
        for (obj, name), stand_in in run.patches().items():
            stack.enter_context(mock.patch.object(obj, name, stand_in))
        if fake:
            stack.enter_context(_FakeMode(allow_non_fake_inputs=True))
        ddist._CTX = None
        try:
            yield run
        finally:
            ddist._CTX = saved_ctx
            torch.set_num_threads(threads)
