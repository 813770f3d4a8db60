"""Read throughput and time-to-first-batch of a DataLoader, and the page cache's part in them.

After a write, the files sit in the page cache (RAM), so a second read never touches the disk.
`drop_cache(paths)` asks the kernel to forget *these* files (posix_fadvise DONTNEED, after a
sync: only clean pages can be dropped; no root needed, nothing else is evicted), and
`resident_fraction(paths)` asks mincore(2) how much of them is still in RAM, so every
measurement can say what it measured: 'cold' (read from the device), 'warm' (from RAM), or
in between. What it cannot drop: the kernel's cache of directory entries and inodes. 'Cold' here
means the file *contents* come from the device; the name lookups stay in RAM (dropping those needs
root: `echo 2 > /proc/sys/vm/drop_caches`, not something to do on a shared machine).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from pathlib import Path

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_LIBC.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_LIBC.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_MAP_FAILED = ctypes.c_void_p(-1).value


def drop_cache(paths) -> None:
    """Evict `paths` from the page cache (sync first: dirty pages cannot be dropped)."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_up(paths) -> None:
    """Read `paths` once, untimed, so that a "warm" pass finds them in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def device_of(path) -> dict:
    """The block device holding `path` (from st_dev and /sys/dev/block): its name, its disk, and
    whether that disk is virtual (virtio/Xen: a VM's disk, behind which the host may cache too)."""
    import os.path as op
    dev = os.stat(path).st_dev
    sysfs = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not op.exists(sysfs):
        return dict(name=f"{os.major(dev)}:{os.minor(dev)}", disk=None, virtual=None)
    real = op.realpath(sysfs)
    name = op.basename(real)
    disk = name if op.exists(op.join(real, "device")) else op.basename(op.dirname(real))
    driver = op.realpath(f"/sys/block/{disk}/device/driver") if op.exists(f"/sys/block/{disk}/device/driver") else ""
    virtual = "virtio" in driver or "xen" in driver or disk.startswith(("vd", "xvd"))
    return dict(name=name, disk=disk, virtual=virtual)


def _resident_pages(path) -> tuple[int, int]:
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vec = ctypes.create_string_buffer(pages)
            if _LIBC.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return sum(b & 1 for b in vec.raw), pages
        finally:
            _LIBC.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(paths) -> float:
    """Fraction of the pages of `paths` that are in the page cache now (mincore(2))."""
    held = total = 0
    for p in paths:
        h, t = _resident_pages(p)
        held, total = held + h, total + t
    return held / total if total else 0.0


def cache_state(fraction: float) -> str:
    """'cold' (<10% in RAM), 'warm' (>90%) or 'partly cached' — the label a result carries."""
    return "cold" if fraction < 0.1 else "warm" if fraction > 0.9 else "partly cached"


def disk_bytes(paths) -> int:
    """The files' apparent size: the bytes they hold (os.path.getsize, `du --apparent-size`)."""
    return sum(os.path.getsize(p) for p in paths)


def allocated_bytes(paths) -> int:
    """The space the files take on the device: whole blocks each (st_blocks x 512, what `du`
    reports). A small file takes at least one block, however few bytes it holds."""
    return sum(os.stat(p).st_blocks * 512 for p in paths)


def loader(ds, batch_size: int, workers: int = 0, prefetch: int | None = None,
           sampler=None, shuffle: bool = False):
    """A DataLoader with the knobs the lesson turns (prefetch_factor only exists with workers)."""
    from torch.utils.data import DataLoader
    kw = dict(prefetch_factor=prefetch or 2, persistent_workers=False) if workers else {}
    return DataLoader(ds, batch_size=batch_size, num_workers=workers, sampler=sampler,
                      shuffle=shuffle, **kw)


def read_rate(make_loader, paths, cold: bool = True, max_batches: int | None = None,
              n_total: int | None = None) -> dict:
    """Time one pass of the DataLoader `make_loader()` over files `paths`.

    Returns samples, seconds, samples_per_s and its spread_per_s (`rate_spread`), mb_per_s (bytes of `paths` on disk / s; with
    `n_total`, only the share samples/n_total of them: a rank reading part of one file set),
    ttfb_s (from creating the loader, workers included, to the first batch), the ids read, and the
    cache state before the pass: cold=True drops the files first, and `resident_before` says how
    far that worked."""
    if cold:
        drop_cache(paths)
    resident = resident_fraction(paths)
    ids, samples, gaps = [], 0, []
    start = time.perf_counter()
    it = iter(make_loader())
    ttfb = last = None
    for b, (x, _, sample_ids) in enumerate(it):
        now = time.perf_counter()
        if ttfb is None:
            ttfb = now - start
        else:
            gaps.append(now - last)
        last = now
        samples += len(x)
        ids.extend(int(i) for i in sample_ids)
        if max_batches is not None and b + 1 >= max_batches:
            break
    seconds = time.perf_counter() - start
    del it  # ends the workers now, not at the next garbage collection
    total = disk_bytes(paths) * (samples / n_total if n_total else 1)
    rate = samples / seconds
    return dict(samples=samples, seconds=seconds, samples_per_s=rate, spread_per_s=rate_spread(rate, gaps),
                mb_per_s=total / seconds / 1e6, ttfb_s=ttfb, disk_mb=total / 1e6, ids=ids,
                resident_before=resident, cache=cache_state(resident))


def rate_spread(rate: float, gaps) -> float:
    """The ± of a pass's samples/s from the times between its batches (`gaps`, the first batch
    left out): `rate` x the relative 95 % confidence interval of the mean gap
    (`dltutor.core.spread.mean_ci`; a rate is samples / time, so its relative ± is the time's).
    Fewer than two gaps: nan, this pass alone gives no interval."""
    from dltutor.core.spread import mean_ci
    if len(gaps) < 2:
        return float("nan")
    return rate * mean_ci(gaps) / (sum(gaps) / len(gaps))


def copy_files(paths, src_root, dst_root) -> dict:
    """Stage `paths` (under src_root) to dst_root, keeping the layout; returns seconds, MB and
    whether source and target are on the same device (then staging cannot make reads faster)."""
    import shutil
    src_root, dst_root = Path(src_root), Path(dst_root)
    start = time.perf_counter()
    for p in paths:
        target = dst_root / Path(p).relative_to(src_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
    os.sync()  # the copy is done when it is on the target, not when it is in RAM
    seconds = time.perf_counter() - start
    dst_root.mkdir(parents=True, exist_ok=True)
    same = os.stat(src_root).st_dev == os.stat(dst_root).st_dev
    return dict(seconds=seconds, mb=disk_bytes(paths) / 1e6, same_device=same,
                src=str(src_root), dst=str(dst_root))
