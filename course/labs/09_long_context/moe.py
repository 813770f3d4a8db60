"""Lab 09 (many experts): a mixture-of-experts classifier trained on the REAL Fashion-MNIST with
expert parallelism over the ranks.

Each 28x28 image is cut into --patch x --patch patches (the tokens), embedded, passed through ONE
MoE layer (top-k gating, capacity factor, a load-balancing auxiliary loss), mean-pooled and
classified. The experts are split over the ranks (rank r owns experts r*E/P .. (r+1)*E/P - 1,
dltutor.experts.parallel.ExpertParallelMoE): each rank routes its own tokens, sends them to the
experts' owners with all-to-all and gets the results back. The gate, the embedding and the head are
replicated: their gradients are averaged over the ranks. --impl deepspeed swaps the course's layer
for DeepSpeed's deepspeed.moe.layer.MoE (ep_size = ranks) with the same sizes, top-k and capacity
factor (dltutor.experts.deepspeed_moe says what differs).

Per step and rank it records the expert load (slots routed to each expert from this rank's tokens),
tokens sent/received, the dropped fraction, the all-to-all time and the step time; at the end the
loss and the test accuracy. After training (course layer only) it measures, on held-out images:
for each --sweep-skews value (a bias added to expert 0's router logit) and --sweep-capacity factor,
the dropped fraction, the tokens each rank's experts receive and the time of the slowest rank; and
for each --sweep-tokens count, the all-to-all bytes and time (for the alpha-beta fit). One
dist.report line per rank. Lines that exist only because of distribution end in # EP: (expert
parallel) or # DDP: (replicated gradients averaged).

--check compares the expert-parallel layer with the same layer on one process instead of training
(float64, every rank's tokens; outputs and gradients; top-1 and top-2, with and without a capacity
factor, an expert that gets no token: dltutor.experts.exactness).

Launch forms (run in this lab's folder):
    python moe.py --tiny                                    # 1 rank: every expert local
    torchrun --nproc-per-node 2 moe.py --check              # EP vs one process, exact (fp64)
    torchrun --nproc-per-node 2 moe.py --tiny               # 2 ranks, 2 experts each
    torchrun --nproc-per-node 2 moe.py --impl deepspeed     # DeepSpeed's MoE layer, ep_size 2
    torchrun --nproc-per-node 4 moe.py --experts 8          # 4 ranks
    srun --ntasks 2 python moe.py --tiny                    # Slurm: one task per rank
From a notebook: dltutor.experts.runs.run_lab(nproc=2, tiny=True).
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist  # EP:
from torch import nn

from dltutor.core import dist as ddist
from dltutor.core import env, flags
from dltutor.core.device import hardware_label, synchronize
from dltutor.data import fashion_mnist
from dltutor.experts import exactness
from dltutor.experts import training as T


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--experts", type=flags.positive_int, default=4, help="experts in the MoE layer")
    p.add_argument("--top-k", type=flags.positive_int, default=2, help="experts per token")
    p.add_argument("--capacity-factor", type=float, default=1.25,
                   help="slots per expert = ceil(tokens*top_k*factor/experts); must be > 0")
    p.add_argument("--aux-weight", type=flags.nonnegative_float, default=0.01,
                   help="weight of the load-balancing loss (0: none)")
    p.add_argument("--skew", type=float, default=0.0, help="bias added to expert 0's router logit")
    p.add_argument("--steps", type=flags.positive_int, default=150, help="training steps")
    p.add_argument("--batch", type=flags.positive_int, default=32, help="images per rank per step")
    p.add_argument("--patch", type=int, choices=(4, 7, 14), default=7, help="patch side (pixels)")
    p.add_argument("--d-model", type=flags.positive_int, default=32, help="token width")
    p.add_argument("--hidden", type=flags.positive_int, default=64, help="expert MLP hidden width")
    p.add_argument("--lr", type=flags.positive_float, default=3e-3, help="Adam learning rate")
    p.add_argument("--test", type=flags.positive_int, default=1000, help="test images (all ranks)")
    p.add_argument("--seed", type=flags.nonnegative_int, default=0, help="same on every rank")
    p.add_argument("--impl", choices=("course", "deepspeed"), default="course",
                   help="whose MoE layer: the course's or deepspeed.moe.layer.MoE")
    p.add_argument("--check", action="store_true",
                   help="only compare expert parallelism with one process (fp64), then exit")
    p.add_argument("--sweep-skews", type=float_list, default="0,0.5,1,2",
                   help="skews measured after training (course layer; empty: none)")
    p.add_argument("--sweep-capacity", type=float_list, default="1,1.25,1.5,2",
                   help="capacity factors measured at each sweep skew")
    p.add_argument("--sweep-tokens", type=float_list, default="64,256,1024,4096",
                   help="tokens per rank for the all-to-all timing points")
    p.add_argument("--repeats", type=flags.positive_int, default=5, help="timed passes per sweep point")
    flags.add_tiny(p, {"steps": 4, "batch": 8, "d_model": 16, "hidden": 32, "test": 64,
                       "sweep_skews": [0.0, 1.0], "sweep_capacity": [1.0, 2.0],
                       "sweep_tokens": [32.0, 256.0], "repeats": 2})
    a = flags.parse(p, argv)
    world = ddist.detect()["world_size"]
    if a.top_k > a.experts:
        p.error(f"--top-k {a.top_k} is above --experts {a.experts}: lower top-k or add experts")
    if not a.capacity_factor > 0 or any(not c > 0 for c in a.sweep_capacity):
        p.error(f"capacity factors must be > 0 (got {a.capacity_factor}, {a.sweep_capacity})")
    if a.experts % world:
        p.error(f"--experts {a.experts} does not divide over {world} ranks: give a multiple of {world}")
    if a.impl == "deepspeed" and (a.skew or a.top_k > 2):
        p.error("--impl deepspeed takes --skew 0 and --top-k 1 or 2 (its gate computes the logits "
                "inside; DeepSpeed's MoE supports k = 1 or 2)")
    return a


def float_list(text) -> list[float]:
    return [float(x) for x in str(text).split(",") if x.strip()]


def load_images(n_train: int, n_test: int, seed: int):
    """(train images, labels, test images, labels): 28x28 floats, normalised; SystemExit if absent."""
    sets = fashion_mnist.load(env.data_dir())
    if sets is None:
        raise SystemExit("lab 09 trains on the real Fashion-MNIST and found none: "
                         + fashion_mnist.fix_message(fashion_mnist.source_dir()))

    def take(ds, n, order):
        idx = order[:n]
        x = torch.from_numpy(ds.data[idx][:, 2:30, 2:30, 0].copy()).float() / 255.0
        return (x - fashion_mnist.MEAN[0]) / fashion_mnist.STD[0], torch.as_tensor(ds.targets)[idx]

    g = torch.Generator().manual_seed(seed)  # the same order on every rank
    train, test = sets
    return (*take(train, n_train, torch.randperm(len(train), generator=g).numpy()),
            *take(test, n_test, torch.arange(len(test)).numpy()))


class PatchMoE(nn.Module):
    """patches -> embedding + position -> x + MoE(x) -> mean over patches -> LayerNorm -> 10 classes."""

    def __init__(self, patch: int, d_model: int, moe: nn.Module):
        super().__init__()
        self.patch, n = patch, (28 // patch) ** 2
        self.embed = nn.Linear(patch * patch, d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(n, d_model))
        self.moe, self.norm, self.head = moe, nn.LayerNorm(d_model), nn.Linear(d_model, 10)

    def tokens(self, images):
        p = self.patch
        x = images.unfold(1, p, p).unfold(2, p, p)                     # [B, 28/p, 28/p, p, p]
        return x.reshape(images.shape[0], -1, p * p)                   # [B, tokens, p*p]

    def embedded(self, images):
        """[images * tokens, d_model]: what the MoE layer sees."""
        h = self.embed(self.tokens(images)) + self.pos
        return h.reshape(-1, h.shape[-1])

    def forward(self, images):
        flat = self.embedded(images)
        y = flat + self.moe(flat)                                       # EP: tokens to their experts
        return self.head(self.norm(y.reshape(images.shape[0], -1, y.shape[-1]).mean(1)))


def average_gradients(model, world: int) -> None:
    """Replicated parameters: all-reduce and average. Expert parameters: their gradient already
    sums every rank's tokens (the all-to-all's backward), so it is only divided by the ranks."""
    if world == 1:
        return
    shared = [p.grad for n, p in model.named_parameters() if p.grad is not None and not T.is_expert(n, p)]
    flat = torch.cat([g.reshape(-1) for g in shared])
    dist.all_reduce(flat)                                               # DDP: sum over the ranks
    flat /= world                                                       # DDP: the mean
    torch.nn.utils.vector_to_parameters(flat, shared)
    for n, p in model.named_parameters():
        if p.grad is not None and T.is_expert(n, p):
            p.grad /= world                                             # EP: global mean loss


def train(a, ctx, model, layer, data) -> list[dict]:
    xs, ys = data
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    rank, world, log = ctx.rank, ctx.world_size, []
    per_step = a.batch * world
    for step in range(a.steps):
        lo = (step * per_step) % (len(xs) - per_step + 1) + rank * a.batch  # EP: this rank's share
        x, y = xs[lo:lo + a.batch].to(ctx.device), ys[lo:lo + a.batch].to(ctx.device)
        synchronize(ctx.device)
        t0 = time.perf_counter()
        logits = model(x)
        task = nn.functional.cross_entropy(logits, y)
        aux = layer.aux_loss()
        (task + a.aux_weight * aux).backward()
        average_gradients(model, world)
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize(ctx.device)
        log.append({"step": step, "loss": task.item(), "aux": float(aux.detach()), "step_s": time.perf_counter() - t0,
                    **layer.step_stats()})
    return log


@torch.no_grad()
def checksums(model) -> dict:
    """Sums of the replicated and of this rank's expert parameters: the replicated sum must be
    the same on every rank (their gradients were averaged), the experts' differ (each rank its own)."""
    sums = {"replicated_sum": 0.0, "expert_sum": 0.0}
    for n, p in model.named_parameters():
        sums["expert_sum" if T.is_expert(n, p) else "replicated_sum"] += p.double().sum().item()
    return sums


@torch.no_grad()
def evaluate(ctx, model, xs, ys) -> dict:
    """Test accuracy over every rank's share of the test images (counts summed over the ranks)."""
    model.eval()
    share = xs.chunk(ctx.world_size)[ctx.rank], ys.chunk(ctx.world_size)[ctx.rank]
    logits = model(share[0].to(ctx.device))
    loss = nn.functional.cross_entropy(logits, share[1].to(ctx.device), reduction="sum")
    counts = torch.tensor([(logits.argmax(1).cpu() == share[1]).sum().item(), len(share[1]), loss.item()],
                          dtype=torch.float64, device=ctx.device)
    if ctx.world_size > 1:
        dist.all_reduce(counts)                                         # EP: every rank's share
    model.train()
    return {"test_accuracy": (counts[0] / counts[1]).item(), "test_loss": (counts[2] / counts[1]).item(),
            "test_images": int(counts[1].item())}


def check(ctx) -> int:
    """--check: expert parallelism vs one process on every case of dltutor.experts.exactness."""
    cases = exactness.cases(ctx.rank, ctx.world_size, device=ctx.device)
    worst = max(max(c["out_err"], c["dx_err"], c["gate_err"], c["expert_err"]) for c in cases)
    print(f"[rank {ctx.rank}] {len(cases)} cases on {ctx.world_size} rank(s), "
          f"{hardware_label(ctx.device)}: largest difference from one process {worst:.1e} (fp64)")
    ddist.report(check=cases, world_size=ctx.world_size, hardware=hardware_label(ctx.device))
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    with ddist.session() as ctx:  # EP: torchrun / srun variables -> process group
        if a.check:
            return check(ctx)
        torch.manual_seed(a.seed)  # EP: the same replicated weights on every rank
        n_train = min(60000, a.steps * a.batch * ctx.world_size)
        xtr, ytr, xte, yte = load_images(n_train, a.test, a.seed)
        layer = T.make_layer(a, ctx)
        model = PatchMoE(a.patch, a.d_model, layer.module).to(ctx.device)
        log = train(a, ctx, model, layer, (xtr, ytr))
        result = evaluate(ctx, model, xte, yte)
        sweep, timing = ([], [])
        if a.impl == "course":
            with torch.no_grad():
                probe = model.embedded(xte.to(ctx.device))
            sweep = T.skew_sweep(layer, probe, a, ctx)
            timing = T.token_sweep(layer, probe, a, ctx)
        if ctx.rank == 0:
            print(f"# MoE ({a.impl}) on {ctx.world_size} rank(s), {hardware_label(ctx.device)}, "
                  f"{a.experts} experts, top-{a.top_k}, capacity factor {a.capacity_factor}, "
                  f"aux weight {a.aux_weight}, skew {a.skew}: {fashion_mnist.FASHION}")
            print(f"loss {log[0]['loss']:.3f} -> {log[-1]['loss']:.3f} over {a.steps} steps; test accuracy "
                  f"{result['test_accuracy']:.3f} on {result['test_images']} images")
        ddist.report(impl=a.impl, experts=a.experts, top_k=a.top_k, capacity_factor=a.capacity_factor,
                     aux_weight=a.aux_weight, skew=a.skew, batch=a.batch, patch=a.patch,
                     tokens_per_rank=a.batch * (28 // a.patch) ** 2, d_model=a.d_model,
                     hardware=hardware_label(ctx.device), data=fashion_mnist.FASHION,
                     steps=log, sweep=sweep, timing=timing, **result, **checksums(model),
                     **layer.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
