"""Numbers are numbers: what a check accepts where it asks the student for one.

    as_float(np.float64(14.0))   -> 14.0      as_float(True)      -> None
    as_float(torch.tensor(2.5))  -> 2.5       as_float("3")       -> None
    as_int(np.int64(1))          -> 1         as_int(2.0)         -> None   (a float, e.g. from /)

A float that was asked for may come as an int, a numpy scalar, or a one-element numpy array or
torch tensor (what `.sum()` returns); a whole number that was asked for (a rank, a coordinate, a
count) may come as an int, a numpy integer or a one-element integer array/tensor, never as a float
(2.0 and 2.5 are what `/` gives where `//` was meant). A bool is neither (True is not a rank).
"""
from __future__ import annotations

import math
import numbers


def _item(value):
    """A one-element numpy array or torch tensor -> its Python scalar; anything else unchanged."""
    size = getattr(value, "size", None)
    numel = getattr(value, "numel", None)
    if callable(numel):                       # torch.Tensor
        return value.item() if numel() == 1 else value
    if size is not None and not callable(size) and hasattr(value, "dtype") and size == 1:
        return value.reshape(-1)[0].item() if hasattr(value, "reshape") else value.item()
    if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()                   # numpy scalar
    return value


def as_float(value) -> float | None:
    """The finite real number `value` stands for, or None (not a number, a bool, nan, inf)."""
    value = _item(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def as_int(value) -> int | None:
    """The whole number `value` stands for (int, numpy integer, one-element integer tensor), or
    None: a float (even 2.0), a bool, a string."""
    value = _item(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def kind(value) -> str:
    """How to name `value` in a message: its type and repr, short."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
