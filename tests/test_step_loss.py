"""The loss the step model leaves out, as lesson 12 counts it: its copies in the lab
(`timeline_view.loss_copies`), its bytes and the tolerance's activation buffers at a GPT's size
(`timeline_view.at_size`), and what it would add to each peak (`step_tables.loss_table`). Bytes are checked
against the formulas worked by hand."""

from fractions import Fraction

import pytest

from zero_lessons.lab import timeline_view
from zero_lessons.lab.timeline_setup import SPEC, Measured, Span
from zero_lessons.planning import DDP, DeepSpeed, activations, layered_model, timeline, transformer_model
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.planning.step_parts import KINDS
from zero_lessons.present.step_tables import loss_table

SHAPE = MODELS["7.5b"]
GPT = transformer_model(SHAPE)
COPY = SPEC.batch * SPEC.widths[-1] * 4  # one fp32 copy of the lab's outputs: 4,096 B


def rank(rise: int, key: str = "step_zero3") -> Measured:
    """A rank whose loss stretch rises by `rise` bytes from its level."""
    return Measured(key, 2, 0, (Span("loss", 10_000, 10_000 + rise),), (), 0)


def test_the_lab_counts_fp32_copies_of_its_outputs_in_halves():
    # four fp32 copies; a bf16 rank adds a bf16 copy (half an fp32 one), and the scalars do not add a half
    assert COPY == 4_096
    assert timeline_view.loss_copies([rank(4 * COPY + 8, "step_ddp")]) == 4
    assert timeline_view.loss_copies([rank(4 * COPY + COPY // 2 + 16)]) == Fraction(9, 2)
    with pytest.raises(ValueError, match=r"agree on the loss's copies of the outputs"):
        timeline_view.loss_copies([rank(4 * COPY + 8, "step_ddp"), rank(4 * COPY + COPY // 2 + 16)])


def test_the_lab_loss_is_its_logits_in_the_weights_dtype_and_the_fp32_copies():
    # 32 samples x 32 outputs: fp32 logits under DDP (4 B), bf16 under DeepSpeed (2 B), then c fp32 copies
    assert timeline_view.lab_loss("step_ddp", 2, 4) == 1_024 * 4 + 4 * COPY == 20_480
    assert timeline_view.lab_loss("step_zero3", 4, Fraction(9, 2)) == 1_024 * 2 + 18_432
    assert timeline_view.lab_loss("step_zero1", 2, Fraction(1, 2)) == 1_024 * 2 + COPY // 2
    with pytest.raises(ValueError, match="key must be one of step_ddp, .*got 'ddp'"):
        timeline_view.lab_loss("ddp", 2, 4)
    with pytest.raises(ValueError, match="gpus must be one of 2, 4, got 8"):
        timeline_view.lab_loss("step_ddp", 8, 4)
    for wrong in (0, Fraction(1, 3), True):
        with pytest.raises(ValueError, match="copies must be a whole or half number"):
            timeline_view.lab_loss("step_ddp", 2, wrong)


def test_at_a_gpts_size_the_loss_is_gigabytes_and_the_activation_buffers_megabytes():
    s, b, h, v = SHAPE.seq_len, SHAPE.micro_batch, SHAPE.hidden, SHAPE.vocab
    assert (s, b, h, v) == (2_048, 1, 4_352, 50_257)
    found = timeline_view.at_size(SHAPE, 4)
    assert found == {
        "loss": 4 * 4 * 2_048 * 50_257,
        "layer output": 2 * 2_048 * 4_352,
        "activation gradients": 4 * 2_048 * 4_352,
    }
    assert [round(n / 1e9, 2) for n in found.values()] == [1.65, 0.02, 0.04]
    mid = activations.Transformer(layers=24, hidden=2048, heads=16, seq_len=2048, micro_batch=4)
    assert timeline_view.at_size(mid, 1)["loss"] == 2_048 * 4 * 50_257 * 4  # the micro-batch counts too
    bf16 = timeline_view.at_size(SHAPE, Fraction(9, 2))["loss"]  # DeepSpeed's: and a bf16 copy, 2 B each
    assert bf16 == found["loss"] + 2 * 2_048 * 50_257 and round(bf16 / 1e9, 2) == 1.85
    assert SHAPE.bf16_logits_bytes == 2 * 2_048 * 50_257 == bf16 - found["loss"]  # the head's own output
    with pytest.raises(TypeError, match="shape must be an activations.Transformer"):
        timeline_view.at_size(GPT, 4)
    for wrong in (0, Fraction(1, 3), 1.5):
        with pytest.raises(ValueError, match="copies must be a whole or half number"):
            timeline_view.at_size(SHAPE, wrong)


def test_the_loss_lifts_a_peak_only_where_the_forward_pass_ends_near_it():
    """The 7.5 B GPT on 8 GPUs: without checkpointing the peak is backward block 32's, just above the level
    after forward, and DeepSpeed's loss (4.5 fp32 copies of the logits, 1.85 GB) lifts it; with checkpointing
    the peak is far above that level."""
    runs = [timeline(GPT, DeepSpeed(stage=s), 8, checkpointing=ck) for ck in (False, True) for s in (1, 2, 3)]
    for t in runs:  # the loss runs between the last forward phase and the first backward one, freeing nothing
        last, first = t.phase("forward block 32"), t.phase("backward block 32")
        assert t.phases.index(first) == t.phases.index(last) + 1
        assert all(last.bytes_of(k) <= first.bytes_of(k) for k in KINDS)
    table = loss_table(runs, timeline_view.at_size(SHAPE, Fraction(9, 2))["loss"])
    assert table.head[-1] == "lift GB" and [r[:2] for r in table.body][:2] == [
        ("DeepSpeed ZeRO-1", "off"),
        ("DeepSpeed ZeRO-2", "off"),
    ]
    assert [r[-1] for r in table.body] == ["0.398", "0.701", "1.701", "0.000", "0.000", "0.000"]
    zero3 = table.body[2]
    assert zero3[2:] == ("49.132", "48.981", "50.833", "1.701")
    for row in table.body:  # each row adds up as printed
        peak, after, top, lift = (float(c) for c in row[2:])
        assert abs(top - max(peak, after + 1.853)) <= 0.0015 and round(top - peak, 3) == lift


def test_the_loss_table_counts_exact_bytes_and_refuses_what_it_cannot_show():
    tiny = layered_model([(10,), (10,)], [100, 100])  # DDP, fp32-adam on 1 GPU: 160 B of state, 200 B saved
    t = timeline(tiny, DDP(), 1, "fp32-adam")
    last = [p for p in t.phases if p.kind == "forward"][-1]
    table = loss_table([t], t.peak.total - last.total + 7, "B")
    assert table.body[0][2:] == (f"{t.peak.total:,}", f"{last.total:,}", f"{t.peak.total + 7:,}", "7")
    assert loss_table([t], 0, "B").body[0][-1] == "0"
    with pytest.raises(TypeError, match="timelines must be a non-empty list"):
        loss_table([], 1)
    with pytest.raises(TypeError, match="each timeline must be a planning Timeline"):
        loss_table([t.peak], 1)
    with pytest.raises(ValueError, match="loss must be at least 0 bytes"):
        loss_table([t], -1)
