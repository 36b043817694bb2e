"""A rank's live bytes over time: each storage from the op that makes it until it dies. Imports torch.

`LiveBytes` counts storages as `counting` does (by storage, a view counts nothing more, meta
tensors nothing), but over time. As a dispatch mode it sees every op a thread runs, from Python or
C++ alike (DDP's reducer, autograd's kernels), and tracks each op's new output storages until a
weak reference's callback says they died. `UntypedStorage.resize_`, which FSDP2 uses to free and
refill its gathered weights and which no op sees, is patched while it is on. The bytes are the
storages' own: no allocator rounding, caching or fragmentation, and nothing an op allocates and
frees inside itself (a matmul's workspace, a collective's own buffers). Memory made on another
thread (gloo's workers) is seen only when this thread's ops first touch it (`unseen`).

Marks cut the run into named stretches; each records the bytes live as it begins and its highest point.
"""

from __future__ import annotations

import time
import weakref
from functools import wraps

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from .timeline_setup import Span


def storages(tensor: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages behind `tensor`: its own, or its parts' for a wrapper such as DTensor; none if meta."""
    if is_traceable_wrapper_subclass(tensor):
        parts = (getattr(tensor, name) for name in tensor.__tensor_flatten__()[0])
        return [s for part in parts if isinstance(part, torch.Tensor) for s in storages(part)]
    return [] if tensor.is_meta else [tensor.untyped_storage()]


def _tensors(tree) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages made while it is on and still alive, and the most live since the last mark."""

    def __init__(self):
        super().__init__()
        self.sizes: dict[int, int] = {}  #: id of each live storage -> its bytes
        self.made_by: dict[int, str] = {}  #: id of each live storage -> the op that made it
        self._refs: dict[int, weakref.ref] = {}
        self.level = 0  #: bytes live now
        self.peak = 0  #: most bytes live since the last mark
        self.unseen: dict[int, int] = {}  #: storages an op read that no op made under the counter
        self.spans: list[Span] = []  #: the stretches marked so far
        self._open: tuple[str, int] | None = None  #: the stretch running now: its name and starting level
        self._op = "resize_"  #: what is making storages now
        self.settling = False  #: whether each mark first waits for the level to hold still (`settle`)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: nothing is compiled under the counter, so its dispatch needs no Dynamo guard.

        TorchDispatchMode would wrap it in one, and importing Dynamo costs each rank a second or more.
        """
        return False

    def _add(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        if key in self.sizes:
            self._resize(storage)
            return
        self.sizes[key], self.made_by[key] = storage.nbytes(), self._op
        self.level += self.sizes[key]
        self._refs[key] = weakref.ref(storage, lambda _, key=key: self._free(key))

    def _resize(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        self.level += storage.nbytes() - self.sizes[key]
        self.sizes[key] = storage.nbytes()

    def _free(self, key: int) -> None:
        self.level -= self.sizes.pop(key)
        del self._refs[key], self.made_by[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._op = str(func)
        for tensor in _tensors(out):
            for storage in storages(tensor):
                self._add(storage)
        for tensor in _tensors((args, kwargs)):  # an op may resize its arguments (out=, resize_)
            for storage in storages(tensor):
                if id(storage) in self.sizes:
                    self._resize(storage)
                elif storage.nbytes():
                    self.unseen[id(storage)] = storage.nbytes()
        self._op = "resize_"
        self.peak = max(self.peak, self.level)
        return out

    def __enter__(self):
        self._original = original = torch.UntypedStorage.resize_

        @wraps(original)
        def resize_(storage, size):
            result = original(storage, size)
            self._add(storage)
            self.peak = max(self.peak, self.level)
            return result

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._original
        return super().__exit__(*exc)

    def mark(self, name: str | None) -> None:
        """End the running stretch and start one called `name` (None: start none).

        While `settling`, the new stretch starts only once gloo's threads have let go of the collectives
        finished so far, so that a buffer freed late counts in neither stretch.
        """
        if self._open is not None:
            self.spans.append(Span(self._open[0], self._open[1], self.peak))
        if self.settling:
            self.settle()
        self._open = None if name is None else (name, self.level)
        self.peak = self.level

    def point(self, name: str) -> None:
        """Record an instant: the bytes live now, once gloo's threads have let go of finished collectives."""
        self.mark(None)
        if not self.settling:
            self.settle()
        self.spans.append(Span(name, self.level, self.level))

    def settle(self, polls: int = 5, wait: float = 0.002, most: int = 200) -> None:
        """Wait until the level has held still for `polls` polls `wait` seconds apart (at most `most` polls).

        A finished collective's buffers can still be held by gloo's worker thread for a moment after
        the rank's wait() returns; they die when that thread lets go, which needs this one to yield.
        """
        still, level = 0, self.level
        for _ in range(most):
            time.sleep(wait)
            still, level = (still + 1, level) if self.level == level else (0, self.level)
            if still == polls:
                return

    def counted(self, tensors) -> int:
        """The counter's bytes for the distinct storages behind `tensors` (Nones and meta skipped).

        Raises if one of them is a storage the counter never saw made: it would be missing from the level.
        """
        found = {id(s): s for t in tensors if t is not None for s in storages(t)}
        missing = [s.nbytes() for key, s in found.items() if key not in self.sizes and s.nbytes()]
        if missing:
            raise RuntimeError(f"the snapshot names {len(missing)} storages the counter never saw made")
        return sum(self.sizes[key] for key in found if key in self.sizes)

    def beyond(self, tensors) -> tuple[tuple[str, int], ...]:
        """Bytes live outside the storages behind `tensors`, by the op that made them, largest first."""
        known = {id(s) for t in tensors if t is not None for s in storages(t)}
        out: dict[str, int] = {}
        for key, n in self.sizes.items():
            if key not in known and n:
                out[self.made_by[key]] = out.get(self.made_by[key], 0) + n
        return tuple(sorted(out.items(), key=lambda item: (-item[1], item[0])))
