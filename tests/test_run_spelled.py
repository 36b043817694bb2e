"""`run.spelled`: lesson 17's example config with every priced key written out, where DeepSpeed reads it."""

import pytest

from conftest import need_module
from zero_lessons.planning.ds_config import ADAMW
from zero_lessons.run.keys import KEYS, lookup
from zero_lessons.run.spelled import spelled_out


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_every_priced_key_sits_at_its_path_with_its_default(stage):
    config = spelled_out(stage)
    assert config["zero_optimization"]["stage"] == stage
    for key in KEYS:
        value = lookup(config, key.path)
        if key.stage == 3 and stage != 3:
            assert value is None, key.path  # a stage-3 key is left out below stage 3
        elif key.path == "bf16.enabled":
            assert value is True  # the example's, not DeepSpeed's default (off)
        elif key.path == "zero_optimization.overlap_comm":
            assert key.default is None and value is (stage == 3)
        else:
            assert value == key.default, key.path
    assert list(config)[-1] == "optimizer" and config["optimizer"] == ADAMW  # the file runs as it stands
    config["optimizer"]["params"]["lr"] = 0.5
    assert ADAMW["params"]["lr"] == 1e-3  # each config has its own copy


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_advised_config_differs_from_the_defaults_only_where_the_advisor_writes_a_key(stage):
    """The config lesson 17 recommends: the advisor's values for the keys its config writes, the rest as
    `spelled_out`'s defaults; at stage 2 that is overlap_comm on, at stage 3 nothing."""
    from zero_lessons.planning import ds_config
    from zero_lessons.run.baseline import SET

    plain, advised = spelled_out(stage), spelled_out(stage, advisor=True)
    written = ds_config.zero_config(stage)["zero_optimization"]
    assert {k: advised["zero_optimization"][k] for k in SET} == {k: written[k] for k in SET}
    changed = {
        k: (plain["zero_optimization"][k], v)
        for k, v in advised["zero_optimization"].items()
        if plain["zero_optimization"][k] != v
    }
    assert changed == ({"overlap_comm": (False, True)} if stage in (1, 2) else {})
    assert {k: v for k, v in advised.items() if k != "zero_optimization"} == {
        k: v for k, v in plain.items() if k != "zero_optimization"
    }


def test_the_stage_is_checked_with_a_one_line_error():
    with pytest.raises(ValueError, match="stage must be a whole number from 1 to 3, got 4"):
        spelled_out(4)
    with pytest.raises(TypeError, match="stage must be a whole number"):
        spelled_out("2")
    with pytest.raises(TypeError, match="advisor must be True or False"):
        spelled_out(2, advisor="yes")


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_spelled_out_config_validates_in_deepspeed(stage):
    need_module("deepspeed.runtime.zero.config")
    from zero_lessons.planning import ds_config

    parsed = ds_config.validate(spelled_out(stage))
    assert int(parsed.stage) == stage and parsed.overlap_comm is (stage == 3)
    assert parsed.reduce_bucket_size == 500_000_000 and parsed.contiguous_gradients is True
    assert ds_config.validate(spelled_out(stage, advisor=True)).overlap_comm is True
