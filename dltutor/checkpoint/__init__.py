"""Notebook 10's topic: checkpoints that let a stopped or killed run go on bit for bit.

    state.py    the app state DCP saves and loads: model, optimizer, step, each rank's RNG
                states, the data position (which parts: a parameter)
    store.py    step-N folders: save (sync, or async on a group of its own), the newest complete
                one (has .metadata), load it or start fresh, one clear error for another model
    compare.py  full parameters, their sha256 and largest difference; dcp_to_torch and back
    restarts.py a rank killed on purpose (after a step, or inside a save before .metadata: a torn
                folder), torchrun's restart count, and torchrun with --max-restarts and
                TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (why: pytorch issue 135712)

Used by lab course/labs/10_checkpoint/ (notebook 10 is still to be written).
"""
