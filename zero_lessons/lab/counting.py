"""Counting what a rank really holds and really sends. Runs inside each rank; imports torch.

Held bytes are counted by storage, not by tensor: two views of one buffer count once, a padded
shard counts its padding, and meta tensors (no memory) count nothing. Adam's scalar `step`
counters are reported apart from the optimizer state proper.
"""

from __future__ import annotations

import contextlib
import sys
from collections import defaultdict

import torch
import torch.distributed as dist

from .results import Held, Message, Traffic

#: torch.distributed function -> (collective, position and keyword of the argument with the full-size tensor)
PATCHED = {
    "all_reduce": ("all_reduce", 0, "tensor"),
    "broadcast": ("broadcast", 0, "tensor"),
    "reduce": ("reduce", 0, "tensor"),
    "all_gather_single": ("all_gather", 0, "output_tensor"),
    "all_gather_into_tensor": ("all_gather", 0, "output_tensor"),
    "reduce_scatter_single": ("reduce_scatter", 1, "input"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
}
#: DeepSpeed's torch backend keeps its own references to these two, taken when it starts.
DEEPSPEED_BOUND = ("all_gather_function", "reduce_scatter_function")


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor a rank really stores: a DTensor's local shard, else the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def by_field(groups: dict[str, list]) -> dict[str, int]:
    """Bytes per field of the distinct storages behind `groups`, skipping meta tensors and empty slots.

    A storage counts once, in the first field that names it.
    """
    seen: set[int] = set()
    out = {}
    for field, tensors in groups.items():
        out[field] = 0
        for tensor in tensors:
            if tensor is None or _local(tensor).is_meta:
                continue
            storage = _local(tensor).untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                out[field] += storage.nbytes()
    return out


def adam_state(optimizer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Adam's per-parameter tensors, split into its moments and its scalar `step` counters."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer wraps a local optimizer
    pairs = [(k, v) for s in inner.state.values() for k, v in s.items() if torch.is_tensor(v)]
    return [v for k, v in pairs if k != "step"], [v for k, v in pairs if k == "step"]


def groups(model: torch.nn.Module, optimizer) -> dict[str, list]:
    """The tensors behind each field of `held`."""
    params = list(model.parameters())
    moments, steps = adam_state(optimizer)
    return {
        "weights": params,
        "gradients": [p.grad for p in params],
        "optimizer": moments,
        "step_counters": steps,
        "other": [],
    }


def held(model: torch.nn.Module, optimizer) -> Held:
    """Bytes this rank holds in parameters, gradients, optimizer state, and Adam step counters."""
    return Held(**by_field(groups(model, optimizer)))


class CommCounter:
    """Counts the elements and bytes each collective moves, while `counting()` is active."""

    def __init__(self):
        self.nbytes: dict[str, int] = defaultdict(int)  #: bytes per collective
        self.messages: list[Message] = []  #: every call, in order

    def record(self, op: str, tensor: torch.Tensor) -> None:
        """Add one collective over `tensor` (its full, not its per-rank, size)."""
        tensor = _local(tensor)
        self.nbytes[op] += tensor.numel() * tensor.element_size()
        self.messages.append(Message(op, tensor.numel(), str(tensor.dtype).removeprefix("torch.")))

    def traffic(self) -> Traffic:
        """What was counted: every message, elements and bytes per collective."""
        return Traffic.of(self.messages, dict(self.nbytes))

    @contextlib.contextmanager
    def counting(self):
        """Patch torch.distributed's collectives to record every call, and undo it afterwards.

        DeepSpeed's backend took its own references to all-gather and reduce-scatter when it
        started; where DeepSpeed is loaded, those two are patched as well.
        """
        originals = {name: getattr(dist, name) for name in PATCHED if hasattr(dist, name)}
        backend = getattr(sys.modules.get("deepspeed.comm.comm"), "cdb", None)
        bound = {
            attr: getattr(backend, attr)
            for attr in DEEPSPEED_BOUND
            if getattr(backend, attr, None) is not None
        }
        by_function = {function: name for name, function in originals.items()}
        unknown = [attr for attr, function in bound.items() if function not in by_function]
        if unknown:  # counting would silently miss these calls
            raise RuntimeError(
                f"cannot count DeepSpeed's {', '.join(unknown)}: not a torch.distributed collective"
            )

        def wrap(name, function):
            op, position, keyword = PATCHED[name]

            def counted(*args, **kwargs):
                self.record(op, args[position] if len(args) > position else kwargs[keyword])
                return function(*args, **kwargs)

            return counted

        try:
            for name, function in originals.items():
                setattr(dist, name, wrap(name, function))
            for attr, function in bound.items():
                setattr(backend, attr, wrap(by_function[function], function))
            yield self
        finally:
            for name, function in originals.items():
                setattr(dist, name, function)
            for attr, function in bound.items():
                setattr(backend, attr, function)

    @staticmethod
    def ddp_hook(state, bucket):
        """A DDP communication hook that all-reduces through Python, where `counting()` can see it.

        DDP's built-in all-reduce runs in C++ and never passes through torch.distributed's Python
        functions; this hook does the same averaging all-reduce, one bucket at a time.
        """
        tensor = bucket.buffer()
        return (
            dist.all_reduce(tensor.div_(dist.get_world_size()), async_op=True)
            .get_future()
            .then(lambda fut: fut.value()[0])
        )
