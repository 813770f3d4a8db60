"""Make one device fast: measure training images/s of several set-ups side by side, in one run.

Each variant trains a fresh copy of the same model (same seed) for the same number of steps:
DataLoader with 0 and 2 worker processes, data resident on the device, channels_last memory format,
automatic mixed precision (bf16 autocast: timed on a GPU only, see NOT_TIMED_ON_CPU) and
torch.compile. All are built and warmed up first, then timed in turns (`interleave`: each round one
piece of every variant, the order rotated each round), so a slow minute of a shared machine hits
all of them instead of the one that happened to be timed then. A variant that does not apply or
fails says so in `status`; its `img_per_s` is None, never a made-up number.
"""
from __future__ import annotations

import time

import torch

from dltutor.core.device import amp_dtype
from dltutor.core.device import device as default_device
from dltutor.core.tables import Table
from dltutor.single import interleave

# torch can autocast to bf16 on a CPU too (torch.autocast("cpu", dtype=torch.bfloat16)); the course's
# CPU rows train in fp32, so on a CPU the AMP row is not timed, and says so instead of "needs a GPU".
NOT_TIMED_ON_CPU = "on a CPU the course trains in fp32, so not timed (torch's CPU bf16 autocast exists)"
CHUNKS = interleave.CHUNKS   # each set-up's timed steps in up to 5 pieces: the 95 % CI of their mean img/s is the ±


def measure_throughput(model, batches, steps: int = 20, warmup: int = 3, device=None, optimizer=None,
                       channels_last: bool = False, amp: bool = False) -> dict:
    """Training images/s over `steps` timed steps (after `warmup` untimed ones), data loading included;
    `spread` is the 95 % confidence interval (half-width) of the mean img/s of its (up to CHUNKS)
    separately timed pieces (`core.spread.mean_ci`; nan when only one piece was timed).

    `batches` is any iterable of (x, y): a DataLoader, a DeviceLoader or a list; it is re-iterated
    when it runs out. One set-up alone; `compare_speed` times several in turns (`interleave`)."""
    run = interleave.Runner("", model, batches, device or default_device(), optimizer=optimizer,
                            channels_last=channels_last, amp=amp)
    run.warm_up(warmup)
    interleave.time_in_rounds([run], steps)
    if run.error is not None:
        raise run.error
    return run.result()


def _failed(variant: str, exc: BaseException) -> dict:
    msg = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
    return {"variant": variant, "img_per_s": None, "status": f"failed: {type(exc).__name__}: {msg}"}


def compare_speed(make_model, train_ds, batch_size: int = 64, steps: int = 20, warmup: int = 3,
                  device=None, workers=(0, 2), try_compile: bool = True, seed: int = 0,
                  compile_note: str = "skipped", pieces: int = CHUNKS) -> list[dict]:
    """Rows {variant, img_per_s, spread, speedup, status} for the "make one device fast" comparison
    (spread: the 95 % CI of the mean img/s of its timed pieces, `core.spread.mean_ci`).

    Every variant is built and warmed up first (torch.compile compiles then); then all are timed in
    turns (`interleave.time_in_rounds`: each round one piece of every variant, the order rotated),
    so a slow stretch of the machine slows them alike instead of deciding their order.
    `steps` are cut into at most `pieces` pieces (rounds): the ± narrows as 1/sqrt(pieces).
    make_model: a function returning a fresh model. try_compile=False reports torch.compile as
    `compile_note` (e.g. 'skipped in fast mode') instead of measuring it."""
    from dltutor.data.loaders import DeviceLoader, make_loaders, to_device_tensors
    device = torch.device(device or default_device())
    rows = []

    def build(variant, batches, make=None, warm=warmup, **kw):
        try:
            torch.manual_seed(seed)
            run = interleave.Runner(variant, (make or make_model)(), batches, device, **kw)
            run.warm_up(warm)
            row = {"variant": variant, "runner": run}
        except Exception as exc:  # reported in the table, not hidden
            row = _failed(variant, exc)
        rows.append(row)
        return row

    for w in workers:
        loader, _ = make_loaders(train_ds, None, batch_size, workers=w)
        build(f"DataLoader, {w} workers", loader)
    x, y = to_device_tensors(train_ds, device)
    on_dev = DeviceLoader(x, y, batch_size, shuffle=True, augment=True)
    build("data on device", on_dev)
    build("on device + channels_last", on_dev, channels_last=True)
    if device.type == "cuda":
        build(f"on device + AMP ({str(amp_dtype(device)).replace('torch.', '')})", on_dev, amp=True)
    else:
        rows.append({"variant": "on device + AMP (bf16)", "img_per_s": None, "status": NOT_TIMED_ON_CPU})
    compiled = "on device + torch.compile"
    if try_compile:   # built and warmed up (at least one step) here: compiling is never timed
        t0 = time.perf_counter()
        row = build(compiled, on_dev, make=lambda: torch.compile(make_model().to(device)), warm=max(1, warmup))
        if "runner" in row:
            row["status"] = f"ok (compiling + warm-up took {time.perf_counter() - t0:.0f} s)"
    else:
        rows.append({"variant": compiled, "img_per_s": None, "status": compile_note})
    interleave.time_in_rounds([r["runner"] for r in rows if "runner" in r], steps, pieces)
    rows = [_row(r) for r in rows]
    base = rows[0]["img_per_s"]
    for r in rows:
        r["speedup"] = (r["img_per_s"] / base) if (r["img_per_s"] and base) else None
    return rows


def _row(r: dict) -> dict:
    """A built row's result after the rounds: ok with img/s and ±, or failed with the exception."""
    run = r.get("runner")
    if run is None:
        return r
    if run.error is not None:
        return _failed(r["variant"], run.error)
    got = run.result()
    return {"variant": r["variant"], "img_per_s": got["img_per_s"], "spread": got["spread"],
            "pieces": got["pieces"], "status": r.get("status", "ok")}


def speed_table(rows: list[dict], title: str = "") -> Table:
    """The `compare_speed` rows as a table (img/s, its 95 % CI, speed-up over the first row, status)."""
    shown = [{**r, "speedup": f"{r['speedup']:.2f}x" if r.get("speedup") else ""} for r in rows]
    return Table(shown, ["variant", "img_per_s", "spread", "speedup", "status"], title=title,
                 headers={"img_per_s": "img/s", "spread": "± (95 % CI)", "speedup": "vs first"},
                 digits=0, left=("status",), missing="n/a")
