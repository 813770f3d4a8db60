"""The ZeRO memory anatomy, on paper and measured: M_tot = M_m + M_o + M_g + M_a.

On paper (the seed's formula, bytes per device):
  M_m = k_l * p                      the model's parameters   (/ d at ZeRO stage 3)
  M_o = 3 * k_h * p                  Adam: fp32 master copy, momentum, variance (/ d at stage >= 1)
  M_g = k_g * p, k_g = k_l or k_h    the gradients            (/ d at stage >= 2)
  M_a ~ s*b*h*L*((16 k_l + 2) + (2 k_l + 1) * a * s / h)     activations (never partitioned)
p parameters, k_l/k_h bytes of the low/high precision (2/4 in fp16 training, 4/4 in fp32),
d data-parallel ranks, z the ZeRO stage, s sequence length, b micro-batch, h hidden size,
L layers, a attention heads. In pure fp32 without ZeRO the parameters *are* the master copy, so
M_o is 2 * k_h * p there (`master_copy=False`); every ZeRO stage keeps its own fp32 partition.
Gradients: the seed bounds M_g by (k_l or k_h) * p; we use k_g = k_l (default), the gradients in
the training precision as backward produces and reduces them. k_g = k_h counts them in fp32 (fp32
gradient accumulation; DeepSpeed's CPU/NVMe offload keeps an fp32 gradient partition on the
host). Without offload DeepSpeed converts one fp32 gradient partition per parameter group only
for the optimizer step. In fp32 training k_l = k_h = 4 and both give the same bytes.

Measured: `ModelStateMeter` sums the bytes of the tensors a rank really holds — parameters (for
ZeRO-3 the partition `param.ds_tensor`), gradients and optimizer tensors (the engine's flat fp32
partitions, Adam's exp_avg/exp_avg_sq, gradient partitions) — each storage counted once, sampled
during backward so the gradients' peak is seen. `peak_memory_bytes()` gives the process peak (RSS
high-water on CPU, max_memory_allocated on GPU). `deepspeed_estimates()` runs DeepSpeed's own
estimators and turns their printout into numbers. The OS-enforced memory budget that makes an
over-budget allocation fail for real lives in `dltutor.zero.budget`.
"""
from __future__ import annotations

import contextlib
import io
import re
import resource
from dataclasses import asdict, dataclass

from dltutor.core.units import GiB

SEED_2P5B = dict(num_layers=192, h_dim=1024, ff_dim=4096, num_heads=16, vocab=30522,
                 seq_len=512, batch_size=1)  # seed 001 flags; vocab/seq_len/heads: our assumptions (BERT-large)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device, term by term."""
    M_m: float
    M_o: float
    M_g: float
    M_a: float
    stage: int = 0
    d: int = 1

    @property
    def model_states(self) -> float:
        return self.M_m + self.M_o + self.M_g

    @property
    def total(self) -> float:
        return self.model_states + self.M_a

    def as_dict(self, unit: float = 1.0) -> dict:
        out = {k: v / unit for k, v in asdict(self).items() if k.startswith("M_")}
        out.update(model_states=self.model_states / unit, total=self.total / unit,
                   stage=self.stage, d=self.d)
        return out


def activation_bytes(s: int, b: int, h: int, L: int, a: int, k_l: int = 2) -> float:
    """M_a: activations kept for backward by L transformer layers (no recomputation)."""
    return s * b * h * L * ((16 * k_l + 2) + (2 * k_l + 1) * a * s / h)


def estimate_zero_memory(p: int, k_l: int = 2, k_h: int = 4, d: int = 1, z: int = 0, s: int = 0,
                         b: int = 0, h: int = 1, L: int = 0, a: int = 0,
                         master_copy: bool | None = None, k_g: int | None = None) -> MemoryEstimate:
    """The seed's M_m + M_o + M_g + M_a for `p` parameters at ZeRO stage `z` over `d` ranks.

    `master_copy=None` means: a separate fp32 master copy exists unless training is pure fp32
    (k_l == k_h) without ZeRO (z == 0), where Adam updates the parameters themselves. `k_g`:
    bytes per gradient, k_l when None (see the module's docstring).
    """
    if z not in (0, 1, 2, 3) or d < 1:
        raise ValueError(f"need a ZeRO stage 0, 1, 2 or 3 (got {z}) and d >= 1 ranks (got {d})")
    if master_copy is None:
        master_copy = k_l != k_h or z >= 1
    M_m = k_l * p / (d if z >= 3 else 1)
    M_o = (3 if master_copy else 2) * k_h * p / (d if z >= 1 else 1)
    M_g = (k_l if k_g is None else k_g) * p / (d if z >= 2 else 1)
    M_a = activation_bytes(s, b, h, L, a, k_l) if L else 0.0
    return MemoryEstimate(M_m, M_o, M_g, M_a, stage=z, d=d)


def estimate_all_stages(p: int, d: int = 1, **kw) -> list[MemoryEstimate]:
    """`estimate_zero_memory` for stages 0..3 (same `d`, precision and activation sizes)."""
    return [estimate_zero_memory(p, d=d, z=z, **kw) for z in range(4)]


def smallest_fitting_stage(p: int, device_bytes: float, d: int = 1, **kw) -> int | None:
    """The lowest ZeRO stage whose estimated total fits `device_bytes`, or None if none does."""
    for est in estimate_all_stages(p, d=d, **kw):
        if est.total <= device_bytes:
            return est.stage
    return None


def smallest_fitting_d(p: int, device_bytes: float, z: int = 3, max_d: int = 4096, **kw):
    """The fewest data-parallel ranks at which stage `z` fits `device_bytes` (None if never)."""
    for d in range(1, max_d + 1):
        if estimate_zero_memory(p, d=d, z=z, **kw).total <= device_bytes:
            return d
    return None


def bert_layer_params(h_dim: int, ff_dim: int) -> int:
    """One encoder layer: qkv + out projection, two FF linears, two LayerNorms (with biases)."""
    return 4 * h_dim * h_dim + 2 * h_dim * ff_dim + 9 * h_dim + ff_dim


def bert_param_count(num_layers: int, h_dim: int, ff_dim: int, vocab: int = 30522,
                     seq_len: int = 512) -> int:
    """Parameters of `dltutor.zero.bert.build_bert` for these flags, computed on paper."""
    embeddings = vocab * h_dim + seq_len * h_dim + 2 * h_dim
    head = h_dim * h_dim + h_dim + 2 * h_dim + h_dim * vocab + vocab
    return embeddings + num_layers * bert_layer_params(h_dim, ff_dim) + head


def seed_on_paper(d: int = 2, k_l: int = 2, k_h: int = 4, device_gib: float = 16.0) -> dict:
    """The seed's 2.5B BERT worked on paper: p, the four terms per stage, what fits a device."""
    c = SEED_2P5B
    p = bert_param_count(c["num_layers"], c["h_dim"], c["ff_dim"], c["vocab"], c["seq_len"])
    act = dict(s=c["seq_len"], b=c["batch_size"], h=c["h_dim"], L=c["num_layers"],
               a=c["num_heads"], k_l=k_l, k_h=k_h)
    return dict(p=p, config=c, d=d, estimates=estimate_all_stages(p, d=d, **act),
                single_device=estimate_zero_memory(p, d=1, z=0, **act),
                fits_stage=smallest_fitting_stage(p, device_gib * GiB, d=d, **act),
                fits_d_stage3=smallest_fitting_d(p, device_gib * GiB, z=3, **act))


# ---------------------------------------------------------------- measured
def _walk(obj, path, out, seen, depth=0):
    """Collect (path, tensor) reachable from obj through containers and one level of objects."""
    import torch
    if id(obj) in seen or depth > 5:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
    elif isinstance(obj, (list, tuple, set)):
        for i, x in enumerate(obj):
            _walk(x, f"{path}[{i}]", out, seen, depth + 1)
    elif isinstance(obj, dict):
        for k, x in obj.items():
            _walk(x, f"{path}[{k if isinstance(k, (str, int)) else ''}]", out, seen, depth + 1)
    elif depth < 2 and hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module):
        for k, x in vars(obj).items():
            _walk(x, f"{path}.{k}", out, seen, depth + 1)


def _storage(t):
    if t is None or t.device.type == "meta" or t.numel() == 0:
        return None
    st = t.untyped_storage()
    return (st.data_ptr(), st.nbytes()) if st.data_ptr() else None


class ModelStateMeter:
    """Bytes of parameters, gradients and optimizer state this rank holds (each storage once).

    `model` is the nn.Module (for DeepSpeed: `engine.module`), `optimizer` the torch optimizer
    or DeepSpeed's ZeRO optimizer (`engine.optimizer`). Call `arm()` before a backward pass:
    hooks then sample the holdings as each gradient lands, so the peak is seen even when
    DeepSpeed frees full gradients right after reducing them. `sample()` can be called any time;
    `peak` holds the largest total seen, split into params / grads / optimizer.
    """

    def __init__(self, model, optimizer=None):
        self.model, self.optimizer = model, optimizer
        self.peak = dict(params=0, grads=0, optimizer=0, total=0)
        self._hooks, self._opt_cache = [], []

    def _optimizer_tensors(self):
        found = []
        if self.optimizer is not None:
            _walk(self.optimizer, "opt", found, set())
        return found

    def sample(self, refresh: bool = True) -> dict:
        if refresh or not self._opt_cache:
            self._opt_cache = self._optimizer_tensors()
        seen, sums = set(), dict(params=0, grads=0, optimizer=0)

        def add(kind, t):
            st = _storage(t)
            if st and st[0] not in seen:
                seen.add(st[0])
                sums[kind] += st[1]
        for prm in self.model.parameters():
            add("params", prm.data)
            add("params", getattr(prm, "ds_tensor", None))
        for prm in self.model.parameters():
            add("grads", prm.grad)
        for path, t in self._opt_cache:
            low = path.lower()
            kind = ("grads" if "grad" in low else
                    "params" if ("bit16" in low or "fp16" in low) and "fp32" not in low
                    else "optimizer")
            add(kind, t)
        sums["total"] = sum(sums.values())
        if sums["total"] > self.peak["total"]:
            self.peak = dict(sums)
        return sums

    def arm(self):
        """Sample after every gradient accumulation of the next backward pass(es)."""
        self._opt_cache = self._optimizer_tensors()
        for prm in self.model.parameters():
            if prm.requires_grad:
                self._hooks.append(prm.register_post_accumulate_grad_hook(
                    lambda _p: None if self.sample(refresh=False) else None))
        return self

    def disarm(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []


def peak_memory_bytes(device=None) -> dict:
    """Peak process memory: RSS high-water (CPU) and max_memory_allocated (GPU, if in use)."""
    out = dict(peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    with contextlib.suppress(OSError):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(("VmData:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
    if device is not None and getattr(device, "type", str(device)).startswith("cuda"):
        import torch
        out["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
    return out


# ---------------------------------------------------------------- DeepSpeed's own estimators
_ROW = re.compile(r"^\s*([\d.]+)GB\s*\|\s*([\d.]+)GB\s*\|\s*(.+)$")


def deepspeed_estimates(model=None, total_params=None, largest_layer_params=None, stage=3,
                        num_gpus_per_node=1, num_nodes=1) -> list[dict]:
    """DeepSpeed's `estimate_zero{2,3}_model_states_mem_needs_*` as rows of numbers.

    Pass a built `model` (the `_all_live` variant) or `total_params` (+ `largest_layer_params`
    at stage 3; the `_all_cold` variant). The printout (GB with two decimals) is captured and
    parsed; exact bytes come from the same estimator called per option. Each row: options,
    per_cpu_gb / per_gpu_gb as printed, per_cpu_bytes / per_gpu_bytes exact, text (the line).
    """
    if stage == 3:
        from deepspeed.runtime.zero import stage3 as mod
    else:
        from deepspeed.runtime.zero import stage_1_and_2 as mod
    if model is not None:
        counted = mod.model_to_params(model)
        total_params, largest = counted if stage == 3 else (counted, None)
        largest_layer_params = largest if largest_layer_params is None else largest_layer_params
    kw = dict(num_gpus_per_node=num_gpus_per_node, num_nodes=num_nodes)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        if stage == 3:
            mod.estimate_zero3_model_states_mem_needs_all_cold(
                total_params, largest_layer_params or 0, **kw)
        else:
            mod.estimate_zero2_model_states_mem_needs_all_cold(total_params, **kw)
    rows = []
    for line in buf.getvalue().splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        opts = dict(o.strip().split("=") for o in m.group(3).split(","))
        offload = opts.get("offload_optimizer", "none").strip() != "none"
        if stage == 3:
            exact = mod.estimate_zero3_model_states_mem_needs(
                total_params, largest_layer_params or 0, cpu_offload=offload,
                cpu_offload_params=opts.get("offload_param", "none").strip() != "none",
                zero_init=opts.get("zero_init", "1").strip() == "1", **kw)[:2]
        else:
            exact = mod.estimate_zero2_model_states_mem_needs(total_params, cpu_offload=offload,
                                                              **kw)
        rows.append(dict(options=m.group(3).strip().replace("OffloadDeviceEnum.", ""),
                         per_cpu_gb=float(m.group(1)),
                         per_gpu_gb=float(m.group(2)), per_cpu_bytes=int(exact[0]),
                         per_gpu_bytes=int(exact[1]), text=line.strip()))
    return rows
