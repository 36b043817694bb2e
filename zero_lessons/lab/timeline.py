"""A rank's step timeline: live bytes over one training step, the phases marked by hooks. Imports torch.

The counter (`live_bytes.LiveBytes`) is on from before the model is built until after the last step,
so it has seen every storage the run made. The phases are marked by hooks:
- a forward pre-hook on each module, put before any framework's own (`prepend`), so that a
  gather for the module counts in its forward;
- a gradient hook on each module's output as the next module receives it (after the frameworks'
  forward hooks have wrapped it), so that it runs before their backward hooks: backward reaches a
  module when its output's gradient is ready;
- an autograd callback queued as backward starts, so it runs first among those queued for its end,
  where the frameworks finish their reductions ("gradient reduction").
The step is the lab's: `model(x).float().pow(2).mean()`, backward, optimizer step. At the three
boundaries the lab's own snapshot (`counting.groups`, `rank_deepspeed.groups`) is taken at the
same instant and its storages are counted again by the counter.
"""

from __future__ import annotations

import gc
import importlib
import time

import torch

from . import counting, rank_deepspeed, rank_torch, ranks
from .live_bytes import LiveBytes
from .modes import deepspeed_config
from .results import Held
from .timeline_setup import SPEC, Boundary, Measured, Setup


def module_names(modules) -> list[str]:
    """What the marks call each module of the MLP: "linear 1", "relu 1", ..., "linear 4"."""
    counts: dict[str, int] = {}
    names = []
    for module in modules:
        kind = next(k for k in (torch.nn.Linear, torch.nn.ReLU, type(module)) if isinstance(module, k))
        kind = kind.__name__.lower()  # FSDP2 renames the classes it wraps: FSDPLinear is still a Linear
        counts[kind] = counts.get(kind, 0) + 1
        names.append(f"{kind} {counts[kind]}")
    return names


def mark_phases(counter: LiveBytes, model: torch.nn.Module) -> None:
    """Hooks marking each module's forward and backward; the last module's backward is marked by `forward`."""
    modules = list(model)
    for name, module in zip(module_names(modules), modules, strict=True):
        module.register_forward_pre_hook(lambda *_, n=name: counter.mark(f"forward {n}"), prepend=True)
        if module is not modules[-1]:
            module.register_forward_hook(lambda _m, _i, out, n=name: backward_mark(counter, out, n))


def backward_mark(counter: LiveBytes, output: torch.Tensor, name: str, last: bool = False) -> None:
    """Mark "backward `name`" when `output`'s gradient is ready; for the last module, queue the end's mark."""

    def hook(_grad):
        counter.mark(f"backward {name}")
        if last:
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(lambda: counter.mark("gradient reduction"))

    output.register_hook(hook)


def forward(counter: LiveBytes, model, x: torch.Tensor) -> torch.Tensor:
    """The loss of one forward pass, marking the stretches around it ("before forward", "loss")."""
    counter.mark("before forward")
    y = model(x)
    counter.mark("loss")
    y = y.view_as(y)  # a view of its own, whose gradient hook runs before any framework's on `y`
    backward_mark(counter, y, f"linear {len(SPEC.layers)}", last=True)
    return y.float().pow(2).mean()


def torch_step(counter: LiveBytes, model, optimizer, x: torch.Tensor, boundary) -> None:
    """One PyTorch step, as the lab's (`rank_torch.step`), with its phases marked."""
    optimizer.zero_grad(set_to_none=True)
    boundary("start of step")
    forward(counter, model, x).backward()
    boundary("before optimizer step")
    counter.mark("optimizer step")
    optimizer.step()
    boundary("after optimizer step")


def deepspeed_step(counter: LiveBytes, engine, x: torch.Tensor, boundary) -> None:
    """One DeepSpeed step, as the lab's (`rank_deepspeed.step`), with its phases marked."""
    boundary("start of step")
    engine.backward(forward(counter, engine, x))
    boundary("before optimizer step")
    counter.mark("optimizer step")
    engine.step()
    boundary("after optimizer step")


def build(setup: Setup, counter: LiveBytes, rank: int):
    """(step, groups, batch, close) for `setup`: a step of (boundary); the lab's snapshot groups; cleanup.

    PyTorch's Adam runs its foreach path and DeepSpeed's its fused one, as each does on GPU by
    default, so the optimizer's temporaries are those the planning model counts (on CPU torch's
    Adam would loop one tensor at a time).
    """
    model, x = ranks.build_model(SPEC), ranks.batch(rank, SPEC)
    if setup.mode.wrapping:
        model, _ = rank_torch.wrap(setup.mode, model)
        optimizer = torch.optim.Adam(model.parameters(), lr=SPEC.lr, foreach=True)
        mark_phases(counter, getattr(model, "module", model))
        return (
            lambda boundary: torch_step(counter, model, optimizer, x, boundary),
            lambda: counting.groups(model, optimizer),
            x,
            lambda: None,
        )
    config = deepspeed_config(setup.mode)
    config["train_micro_batch_size_per_gpu"] = SPEC.batch
    config["optimizer"]["params"].update(lr=SPEC.lr, fused=True)
    engine = rank_deepspeed.build(setup.mode, model, config)
    mark_phases(counter, engine.module)
    x = x.to(torch.bfloat16)
    return (
        lambda boundary: deepspeed_step(counter, engine, x, boundary),
        lambda: rank_deepspeed.groups(engine),
        x,
        engine.destroy,
    )


def _run(setup: Setup, counter: LiveBytes, rank: int) -> list[Boundary]:
    """Build `setup` and run SPEC.steps steps under the counter; mark the last and count its boundaries."""
    step, groups, x, close = build(setup, counter, rank)
    boundaries: list[Boundary] = []

    def boundary(name: str) -> None:
        counter.point(name)
        snapshot = groups()
        tensors = [t for group in snapshot.values() for t in group]
        held = Held(**counting.by_field(snapshot))
        beyond = counter.beyond([x, *tensors])
        boundaries.append(
            Boundary(name, counter.level, held, counter.counted(tensors), counter.counted([x]), beyond)
        )

    for _ in range(SPEC.steps - 1):
        step(lambda name: None)
    counter.mark(None)
    counter.spans.clear()
    counter.settling = True
    step(boundary)
    counter.mark(None)
    close()
    return boundaries


def measure(setup: Setup, gpus: int, rank: int) -> Measured:
    """One rank's timeline of `setup`: the counter on from before the model is built to after the last step.

    Python's cycle collector is off meanwhile, so storages die when their last reference goes, and not
    whenever a collection happens to run. Afterwards it collects only what the run left in cycles (all
    of it in the youngest generation), so that no engine of this run is torn down inside the next one.
    """
    counter, start = LiveBytes(), time.monotonic()
    # DDP and FSDP2 import Dynamo on their first step. On the way, torch.fx's `wrap` keeps its own frame
    # in a local: a cycle that keeps every frame below it alive until a collection, the step's included
    # (for FSDP2 its last reduce-scatter output, 4,224 B). Imported here, it costs no setup a byte,
    # whichever ran first in the rank.
    importlib.import_module("torch._dynamo")
    gc.disable()
    try:
        with counter:
            boundaries = _run(setup, counter, rank)
    finally:
        gc.collect(0)
        gc.enable()
    unseen, seconds = sum(counter.unseen.values()), time.monotonic() - start
    return Measured(setup.key, gpus, rank, tuple(counter.spans), tuple(boundaries), unseen, seconds)
