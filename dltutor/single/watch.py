"""Watch what one call of the student's `measure(batch_size)` trains (notebook 01's exercise).

    with watching(Expect(params=178_402, image=(3, 32, 32), batch_size=16, device="cpu")) as seen:
        value = measure(16)
    seen.batches      # the images of every training forward of a model, in order: [16, 16, ...]
    seen.problem()    # None, or what the call did not train ("trained on batches of 64 images")

While the block runs, global forward hooks of torch.nn (`register_module_forward_pre_hook`) see
every outermost module call that has parameters and gets a batch of images (N, C, H, W): the
model, whichever way the student builds, wraps or times it (a loop of their own,
`speed.measure_throughput`, `torch.utils.benchmark`). For each such call they note the batch, the
model's parameter count (which says its width), the device, whether it ran in training mode with
grad enabled, whether a backward pass reached its output and whether the weights were updated
in place afterwards (an optimizer step bumps the parameter's version counter).

A model of the wrong size, or a batch larger than asked, stops the call at its first forward
(`Stopped`, a BaseException, so a student's `except Exception` does not swallow it): the verdict
is already known, and timing a ResNet-18 where a tiny one was asked would take minutes on a CPU.

`delay` (seconds) is slept before every training forward of the model: the check slows each step
down by a known amount and sees whether the number `measure` returns follows.
"""
from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field


class Stopped(BaseException):
    """Raised inside the student's call when the first forward already shows the mistake."""


@dataclass(frozen=True)
class Expect:
    params: int            # parameters of models.cifar_resnet(width=WIDTH)
    image: tuple           # the shape of one image of x_train, e.g. (3, 32, 32)
    batch_size: int        # the size the call was asked to measure
    device: str            # the device type the notebook trains on ("cpu", "cuda")


@dataclass
class Seen:
    expect: Expect
    batches: list = field(default_factory=list)     # images in each training forward
    params: set = field(default_factory=set)        # parameter counts of the models trained
    images: set = field(default_factory=set)        # image shapes the model was given
    devices: set = field(default_factory=set)
    not_training: int = 0      # forwards of a model in eval mode or without grad
    backwards: int = 0         # backward passes that reached a trained model's output
    updated: bool = False      # the weights changed in place after the first training forward
    stopped: str = ""          # why the call was stopped at its first forward, if it was
    _versions: list = field(default_factory=list)   # (parameter, its version at first forward)

    @property
    def steps(self) -> int:
        return len(self.batches)

    def problem(self) -> str | None:
        """What the call did not do that a measurement of the exercise's training steps does."""
        e, bs = self.expect, self.expect.batch_size
        if self.stopped:
            return self.stopped
        if not self.steps:
            return ("ran no training step while the check watched (no forward of a model in "
                    "training mode with grad enabled): the number it returns was not measured"
                    + (" (the model only ran in eval mode or under no_grad)"
                       if self.not_training else ""))
        if self.images != {e.image}:
            return f"trained on images of shape {_shapes(self.images)}, not x_train's {e.image}"
        if self.devices != {e.device}:
            return f"trained on {'/'.join(sorted(self.devices))}, not on the notebook's device {e.device}"
        common = Counter(self.batches).most_common(1)[0][0]
        if common != bs:
            return f"trained on batches of {common} images, not of {bs} (the batch size asked)"
        if not self.backwards:
            return "ran the model forward only (no backward pass): time whole training steps"
        if not self.updated:
            return ("ran forward and backward but never updated the weights (no optimizer "
                    "step): time whole training steps")
        return None

    def _finish(self) -> None:
        self.updated = any(p._version > v for p, v in self._versions)
        self._versions.clear()


def _shapes(shapes) -> str:
    return " and ".join(str(tuple(s)) for s in sorted(shapes))


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@contextlib.contextmanager
def watching(expect: Expect, delay: float = 0.0):
    """Note every training forward of a model during the block (see the module's docstring)."""
    import torch
    from torch.nn.modules import module as nn_module

    seen, depth = Seen(expect), [0]

    def before(module, args):
        depth[0] += 1
        x = args[0] if args else None
        if depth[0] != 1 or not torch.is_tensor(x) or x.dim() != 4:
            return
        params = next(module.parameters(), None)
        if params is None:
            return
        if not (module.training and torch.is_grad_enabled()):
            seen.not_training += 1
            return
        count = _count(module)
        seen.batches.append(int(x.shape[0]))
        seen.params.add(count)
        seen.images.add(tuple(x.shape[1:]))
        seen.devices.add(x.device.type)
        if not seen._versions:
            seen._versions.append((params, params._version))
        if count != expect.params:
            seen.stopped = (f"trained a model with {count:,} parameters; the notebook's "
                            f"models.cifar_resnet(width=WIDTH) has {expect.params:,}: time that "
                            "model, at the notebook's WIDTH")
            raise Stopped(seen.stopped)
        if x.shape[0] > expect.batch_size:
            seen.stopped = (f"trained on batches of {x.shape[0]} images, not of "
                            f"{expect.batch_size} (the batch size asked)")
            raise Stopped(seen.stopped)
        if delay:
            time.sleep(delay)

    def after(module, args, output):
        depth[0] -= 1
        if (depth[0] == 0 and torch.is_tensor(output) and output.requires_grad
                and module.training and next(module.parameters(), None) is not None):
            output.register_hook(_backward)

    def _backward(grad):
        seen.backwards += 1

    handles = [nn_module.register_module_forward_pre_hook(before),
               nn_module.register_module_forward_hook(after, always_call=True)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
        seen._finish()
