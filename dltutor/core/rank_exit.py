"""How a rank leaves once its process group is torn down cleanly: flush, then `os._exit(code)`.

Why: after `destroy_process_group()`, the C++ side of the gloo backend sometimes aborts the
process while the interpreter shuts down ("terminate called without an active exception",
SIGABRT), after the rank has printed and reported everything. Seen a few times per CI run on 2
busy cores, under torchrun, deepspeed and srun alike, it turned finished runs into failures.
`dist.session` calls `arm()` after a clean teardown; at exit the rank then skips the
interpreter's and the C++ runtime's teardown, keeping the exit code it was going to have:
`sys.exit(n)` -> n, an uncaught exception -> 1, falling off the end -> 0.
Only a clean teardown arms it (no exception in flight), never inside a notebook kernel. Labs
end with `sys.exit(main())`, not `raise SystemExit(...)`, so their exit code is seen here.
"""
from __future__ import annotations

import atexit
import os
import sys

_state = {"armed": False, "code": 0}


def _record_exit(original):
    def exit_(code=0):
        _state["code"] = code if isinstance(code, int) else (0 if code is None else 1)
        original(code)
    return exit_


def _record_exception(original):
    def hook(kind, value, tb):
        _state["code"] = 1
        original(kind, value, tb)
    return hook


def _leave() -> None:
    if _state["armed"]:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(_state["code"])


def arm() -> None:
    """From now on this process leaves with os._exit(<its exit code>) (see the module doc)."""
    if _state["armed"] or "ipykernel" in sys.modules:   # never inside a notebook kernel
        return
    _state["armed"] = True
    sys.exit = _record_exit(sys.exit)
    sys.excepthook = _record_exception(sys.excepthook)
    atexit.register(_leave)   # registered last, so it runs first among the exit handlers
