"""Lesson 17's example config spelled out: every key `keys.KEYS` prices, at DeepSpeed's default, where a
config file puts it, with the stage and bf16 the example runs. No torch; `planning.ds_config.validate` checks
its `zero_optimization` block against DeepSpeed's own schema."""

from __future__ import annotations

import copy

from .. import checks
from ..planning.ds_config import ADAMW
from .baseline import SET, knobs
from .keys import KEYS

#: Keys whose value here is the example's, not DeepSpeed's default: bf16 on, as the example trains.
EXAMPLE = {"bf16.enabled": True}


def spelled_out(stage: int = 2, advisor: bool = False) -> dict:
    """A DeepSpeed config for the example at `stage` (1 to 3) with every key of `keys.KEYS` written out: at
    its default, but bf16 on (`EXAMPLE`); `overlap_comm` as the value its None default takes at `stage` (True
    at stage 3 only); the stage-3 keys only at stage 3; the micro-batch, which has no default, 1. With
    `advisor`, the keys the advisor's config writes (`baseline.SET`) take the advisor's values. Last, an
    `optimizer` block (a fresh copy of `ds_config.ADAMW`, its hyperparameters placeholders), so that the file
    runs as it stands; an optimizer object passed to `deepspeed.initialize` is used in its place."""
    stage = checks.whole("stage", stage, low=1, high=3)
    checks.instance("advisor", advisor, bool, "True or False")
    chosen, config = knobs(stage, advisor), {}
    for key in KEYS:
        if key.stage == 3 and stage != 3:
            continue
        value = EXAMPLE.get(key.path, key.default)
        if key.knob and (value is None or key.knob in SET):  # as DeepSpeed resolves None, or as advised
            value = getattr(chosen, key.knob)
        _put(config, key.path, value)
    config["zero_optimization"] = {"stage": stage, **config["zero_optimization"]}
    return config | {"optimizer": copy.deepcopy(ADAMW)}


def _put(config: dict, path: str, value: object) -> None:
    """Write `value` at the dotted `path` of `config`, making the blocks on the way."""
    *blocks, leaf = path.split(".")
    for block in blocks:
        config = config.setdefault(block, {})
    config[leaf] = value
