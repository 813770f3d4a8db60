"""Byte units, written once: KiB/MiB/GiB, `fmt_bytes` for printouts and `parse_bytes` for flags."""
from __future__ import annotations

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3
_UNITS = {"gib": GiB, "g": GiB, "gb": GiB, "mib": MiB, "m": MiB, "mb": MiB, "kib": KiB, "k": KiB,
          "kb": KiB, "b": 1, "": 1}


def fmt_bytes(n: float) -> str:
    """1024 -> '1 KiB', 67108864 -> '64 MiB', 1536 -> '1.5 KiB'."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def parse_bytes(text: str) -> int:
    """'64MiB', '1KiB', '4k', '1M', '4096' -> bytes (powers of 1024); ValueError names the fix."""
    s = str(text).strip().replace(" ", "")
    i = len(s)
    while i and not s[i - 1].isdigit():
        i -= 1
    num, unit = s[:i], s[i:].lower()
    try:
        value = float(num)
    except ValueError:
        value = None
    if value is None or unit not in _UNITS:
        raise ValueError(f"cannot read size {text!r}: use a number with an optional unit, "
                         "e.g. 4096, 64KiB, 1MiB, 2GiB")
    return int(value * _UNITS[unit])
