"""Make one device fast: measure training images/s of several set-ups side by side, in one run.

Each variant trains a fresh copy of the same model (same seed) for the same number of steps:
DataLoader with 0 and 2 worker processes, data resident on the device, channels_last memory format,
automatic mixed precision (bf16 autocast: timed on a GPU only, see NOT_TIMED_ON_CPU) and
torch.compile. A variant that does not apply or fails says so in `status`; its `img_per_s` is
None, never a made-up number.
"""
from __future__ import annotations

import time

import torch

from dltutor.core.device import amp_dtype, autocast, synchronize, to_device
from dltutor.core.device import device as default_device
from dltutor.core import spread as ci
from dltutor.core.tables import Table
from dltutor.core.train_step import train_step
from dltutor.single.train import default_optimizer

# torch can autocast to bf16 on a CPU too (torch.autocast("cpu", dtype=torch.bfloat16)); the course's
# CPU rows train in fp32, so on a CPU the AMP row is not timed, and says so instead of "needs a GPU".
NOT_TIMED_ON_CPU = "on a CPU the course trains in fp32, so not timed (torch's CPU bf16 autocast exists)"
CHUNKS = 5   # measure_throughput times its steps in up to 5 pieces: the 95 % CI of their mean img/s is the ±


def measure_throughput(model, batches, steps: int = 20, warmup: int = 3, device=None, optimizer=None,
                       channels_last: bool = False, amp: bool = False) -> dict:
    """Training images/s over `steps` timed steps (after `warmup` untimed ones), data loading included;
    `spread` is the 95 % confidence interval (half-width) of the mean img/s of its (up to CHUNKS)
    separately timed pieces (`core.spread.mean_ci`; nan when only one piece was timed).

    `batches` is any iterable of (x, y): a DataLoader, a DeviceLoader or a list; it is re-iterated
    when it runs out."""
    device = torch.device(device or default_device())
    model.to(device).train()
    if channels_last:
        model.to(memory_format=torch.channels_last)
    optimizer = optimizer or default_optimizer(model)

    def stream():
        while True:
            yield from batches

    it = stream()
    images, t0, rates = 0, None, []
    per_chunk = max(1, -(-steps // CHUNKS))   # the timed steps in <= CHUNKS pieces, each timed alone
    for i in range(warmup + steps):
        if i == warmup:
            synchronize(device)
            t0 = tick = time.perf_counter()
            chunk_images = 0
        x, y = next(it)
        x, y = to_device(x, device, channels_last), y.to(device, non_blocking=True)
        train_step(model, optimizer, x, y, autocast=lambda: autocast(device, amp))
        if i >= warmup:
            images += y.shape[0]
            chunk_images += y.shape[0]
            if (i - warmup + 1) % per_chunk == 0 or i == warmup + steps - 1:
                synchronize(device)
                now = time.perf_counter()
                rates.append(chunk_images / (now - tick))
                tick, chunk_images = now, 0
    synchronize(device)
    seconds = time.perf_counter() - t0
    return {"img_per_s": images / seconds, "images": images, "seconds": seconds, "steps": steps,
            "spread": ci.mean_ci(rates)}


def compare_speed(make_model, train_ds, batch_size: int = 64, steps: int = 20, warmup: int = 3,
                  device=None, workers=(0, 2), try_compile: bool = True, seed: int = 0,
                  compile_note: str = "skipped") -> list[dict]:
    """Rows {variant, img_per_s, spread, speedup, status} for the "make one device fast" comparison
    (spread: the 95 % CI of the mean img/s of its timed chunks, `core.spread.mean_ci`).

    make_model: a function returning a fresh model. try_compile=False reports torch.compile as
    `compile_note` (e.g. 'skipped in fast mode') instead of measuring it."""
    from dltutor.data.loaders import DeviceLoader, make_loaders, to_device_tensors
    device = torch.device(device or default_device())
    on_gpu = device.type == "cuda"

    def run(batches, **kw):
        torch.manual_seed(seed)
        model = kw.pop("model", None) or make_model()
        return measure_throughput(model, batches, steps, warmup, device, **kw)

    rows = []

    def add(variant, fn):
        try:
            got = fn()
            rows.append({"variant": variant, "img_per_s": got["img_per_s"], "spread": got["spread"],
                         "status": "ok"})
        except Exception as exc:  # reported in the table, not hidden
            msg = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
            rows.append({"variant": variant, "img_per_s": None, "status": f"failed: {type(exc).__name__}: {msg}"})

    for w in workers:
        loader, _ = make_loaders(train_ds, None, batch_size, workers=w)
        add(f"DataLoader, {w} workers", lambda: run(loader))
    x, y = to_device_tensors(train_ds, device)
    on_dev = DeviceLoader(x, y, batch_size, shuffle=True, augment=True)
    add("data on device", lambda: run(on_dev))
    add("on device + channels_last", lambda: run(on_dev, channels_last=True))
    if on_gpu:
        add(f"on device + AMP ({str(amp_dtype(device)).replace('torch.', '')})",
            lambda: run(on_dev, amp=True))
    else:
        rows.append({"variant": "on device + AMP (bf16)", "img_per_s": None, "status": NOT_TIMED_ON_CPU})
    if try_compile:
        def compiled():
            torch.manual_seed(seed)
            model = make_model().to(device)
            t0 = time.perf_counter()
            cmodel = torch.compile(model)
            result = measure_throughput(cmodel, on_dev, steps, warmup, device)
            rows_note["compile"] = time.perf_counter() - t0 - result["seconds"]
            return result
        rows_note = {}
        add("on device + torch.compile", compiled)
        if "compile" in rows_note and rows[-1]["status"] == "ok":
            rows[-1]["status"] = f"ok (compiling + warm-up took {rows_note['compile']:.0f} s)"
    else:
        rows.append({"variant": "on device + torch.compile", "img_per_s": None, "status": compile_note})
    base = rows[0]["img_per_s"]
    for r in rows:
        r["speedup"] = (r["img_per_s"] / base) if (r["img_per_s"] and base) else None
    return rows


def speed_table(rows: list[dict], title: str = "") -> Table:
    """The `compare_speed` rows as a table (img/s, its 95 % CI, speed-up over the first row, status)."""
    shown = [{**r, "speedup": f"{r['speedup']:.2f}x" if r.get("speedup") else ""} for r in rows]
    return Table(shown, ["variant", "img_per_s", "spread", "speedup", "status"], title=title,
                 headers={"img_per_s": "img/s", "spread": "± (95 % CI)", "speedup": "vs first"},
                 digits=0, left=("status",), missing="n/a")
