"""The FSDP2 equivalents: each pair's two lab modes stand for one stage; the table says what each shards."""

from zero_lessons.lab import modes
from zero_lessons.run import fsdp
from zero_lessons.stages import Stage


def test_each_pair_is_one_stage_in_both_labs():
    for deepspeed, _, torch_mode in fsdp.PAIRS:
        assert (
            modes.get(deepspeed).framework == modes.DEEPSPEED
            and modes.get(torch_mode).framework == modes.PYTORCH
        )
        assert modes.get(deepspeed).stage is modes.get(torch_mode).stage
    assert [modes.get(ds).stage for ds, _, _ in fsdp.PAIRS] == list(Stage)


def test_the_table_says_what_each_stage_shards():
    rows = fsdp.Equivalents().cells()
    assert [row[1] for row in rows[:4]] == [
        "nothing",
        "optimizer state",
        "optimizer state, gradients",
        "optimizer state, gradients, weights",
    ]
    assert rows[2][2].endswith(
        "SHARD_GRAD_OP: every layer's whole weights during the step, as in ZeRO-2, but only shards "
        "between steps"
    )
    assert rows[4][0].startswith("ZeRO-3 with hpZ") and rows[4][3] == "neither: one machine"
    table = fsdp.Equivalents()._repr_markdown_().splitlines()
    assert len(table) == 2 + 5 and table[1] == "| --- | --- | --- | --- |"
    assert (
        "| ZeRO-1 | optimizer state | DDP + ZeroRedundancyOptimizer | ds_zero1, zero_redundancy_optimizer |"
        in table
    )
