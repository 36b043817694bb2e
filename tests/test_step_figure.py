"""The step figure (lesson 12): one panel per setup, bars stacked by kind, measured markers, the model's peak;
the knob table; and the lab's panels and peaks, built here from the lab's own comparison rows."""

from fractions import Fraction
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest

from conftest import cut_marks
from zero_lessons import memory, units
from zero_lessons.lab.timeline_compare import WHY, Compared, allowances, modelled
from zero_lessons.lab.timeline_setup import BY_KEY, STEP_NAMES
from zero_lessons.lab.timeline_view import highest, panels, peaks
from zero_lessons.planning import DDP, DeepSpeed, activations, layered_model, timeline, transformer_model
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.planning.step_effects import CHANGES, effects
from zero_lessons.present.step_figure import (
    BLOCK_TICKS,
    END_PHASES,
    KIND_COLOURS,
    STACK,
    Panel,
    plot_step,
    short_name,
)
from zero_lessons.present.step_tables import kinds_table, parts_table, peak_table
from zero_lessons.stages import Stage

matplotlib.use("Agg")

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
TINY = layered_model([(10,), (20,), (30,)], [1, 2, 3])
# A 7.5 B-class GPT (Ψ ≈ 7.46 B: 36 blocks of width 4,096), near the package's 7.5 B preset.
SHAPE = activations.Transformer(layers=36, hidden=4096, heads=32, seq_len=2048, micro_batch=1)
BIG = transformer_model(SHAPE)


def fake_rows(gpus: int, extra: int = 0) -> tuple[Compared, ...]:
    """Comparison rows as the lab makes them, with every rank measuring the model's bytes, plus `extra` off
    the boundaries on rank 1."""
    rows = []
    for key, setup in BY_KEY.items():
        for phase in modelled(setup, gpus).phases:
            bump = 0 if phase.kind == "boundary" else extra
            measured = (phase.total,) + (phase.total + bump,) * (gpus - 1)
            rows.append(
                Compared(
                    key, gpus, phase.name, phase.kind, phase.total, measured, allowances(setup, phase.kind)
                )
            )
    return tuple(rows)


def test_one_panel_per_setup_with_its_title_labels_and_peak():
    shown = panels(fake_rows(2, extra=32), 2)
    fig = plot_step(shown, "kB", "lab MLP on 2 ranks")
    axes = fig.axes
    assert len(axes) == len(STEP_NAMES) == 5
    for ax, key in zip(axes, STEP_NAMES, strict=True):
        t = modelled(BY_KEY[key], 2)
        recipe = "fp32-adam: 4 + 4 + 8" if key in ("step_ddp", "step_fsdp") else "mixed-adam: 2 + 2 + 12"
        assert ax.get_title(loc="left") == f"{STEP_NAMES[key]} on 2 ranks, {recipe} = 16 B/param"
        assert [tick.get_text() for tick in ax.get_xticklabels()] == [short_name(p.name) for p in t.phases]
        (line,) = [a for a in ax.get_lines() if a.get_gid() == "peak"]
        assert line.get_ydata()[0] == pytest.approx(float(Fraction(t.peak.total) / 1000))
        # The peak is named in full, as the tables name it, and a marker on its line stands over its bar.
        assert ax.get_title(loc="right").endswith(f" at {t.peak.name}")
        (over,) = [a for a in ax.get_lines() if a.get_gid() == "peak bar"]
        box_top = float(
            Fraction(t.peak.total + sum(n for _, n in allowances(BY_KEY[key], t.peak.kind))) / 1000
        )
        assert list(over.get_xdata()) == [t.peak_index]  # over the peak's column, clear of its box and marker
        assert list(over.get_ydata()) == pytest.approx([max(line.get_ydata()[0], box_top)])
        bands = [p for p in ax.patches if p.get_gid() == "boundary"]
        assert len(bands) == sum(p.kind == "boundary" for p in t.phases) == 3
        (marks,) = [a for a in ax.get_lines() if a.get_gid() == "measured"]
        busiest = [float(Fraction(p.total + (0 if p.kind == "boundary" else 32)) / 1000) for p in t.phases]
        assert list(marks.get_ydata()) == pytest.approx(busiest)
        tops = _bar_tops(ax, len(t.phases))
        assert tops == pytest.approx([float(Fraction(p.total) / 1000) for p in t.phases])
        # Each phase's tolerance sits on its bar as a dashed box; a boundary allows nothing and gets none.
        boxes = {round(b.get_x() + b.get_width() / 2): b for b in ax.patches if b.get_gid() == "tolerance"}
        allowed = [sum(n for _, n in allowances(BY_KEY[key], p.kind)) for p in t.phases]
        assert sorted(boxes) == [i for i, n in enumerate(allowed) if n]
        for i, box in boxes.items():
            assert (box.get_y(), box.get_height()) == pytest.approx((tops[i], allowed[i] / 1000))
        assert not [a for a in ax.get_lines() if a.get_gid() == "loss"]  # no timelines given: no loss column
    ARTIFACTS.mkdir(exist_ok=True)
    fig.savefig(ARTIFACTS / "step-figure-lab.png", dpi=100)


def _bar_tops(ax, count: int) -> list[float]:
    """The top of each phase's stack of bars, read back from the drawn rectangles."""
    tops = [0.0] * count
    for patch in ax.patches:
        if patch.get_gid() in KIND_COLOURS:
            i = round(patch.get_x() + patch.get_width() / 2)
            tops[i] = max(tops[i], patch.get_y() + patch.get_height())
    return tops


def test_a_modelled_loss_is_a_bar_of_its_own_and_can_take_the_peak():
    """With `model_loss`, the loss's column stacks the last forward phase's parts and the loss, hatched; the
    red line, mark and title move to it when it tops the step model's peak, and stay put when it does not."""
    t = timeline(BIG, DeepSpeed(stage=2), 8)
    loss = 2 * 10**9  # more than the backward pass adds: the loss is the peak
    panel = Panel("zero-2", t, model_loss=loss)
    assert panel.peak == (t.peak_with_loss(loss), None) and panel.peak[0] > t.peak.total
    ax = plot_step([panel], "GB").axes[0]
    xs, loss_x = panel.columns()
    bars = [p for p in ax.patches if p.get_x() + p.get_width() / 2 == loss_x]
    assert sum(b.get_height() for b in bars) * 10**9 == pytest.approx(float(t.after_forward.total + loss))
    assert [b.get_gid() for b in bars][-1] == "model loss" and bars[-1].get_hatch() == "////"
    (mark,) = [line for line in ax.get_lines() if line.get_gid() == "peak bar"]
    assert list(mark.get_xdata()) == [loss_x] and ax.get_title(loc="right").startswith("peak (loss counted) ")
    assert ax.get_title(loc="right").endswith("GB at the loss")
    small = Panel("zero-2", t, model_loss=1)  # a loss that tops nothing: the step model's peak stays
    assert small.peak == (t.peak.total, t.peak_index)
    legend_names = [text.get_text() for text in plot_step([panel], "GB").legends[0].get_texts()]
    assert "the loss, after the forward pass" in legend_names
    assert "the peak, loss counted (▼ marks its column)" in legend_names
    unmarked = plot_step([panel], "GB", peak_mark=False).legends[0].get_texts()
    assert "the peak, loss counted" in [text.get_text() for text in unmarked]  # no triangle, no word of one
    with pytest.raises(ValueError, match="model_loss bytes must be ≥ 0"):
        Panel("a", t, model_loss=-1)


def test_the_loss_gets_a_column_of_its_own_after_the_forward_pass():
    t = timeline(TINY, DDP(), 2)
    panel = Panel("ddp", t, tuple(p.total for p in t.phases), loss=t.peak.total + 500)
    last_forward = max(i for i, p in enumerate(t.phases) if p.kind == "forward")
    xs, loss_x = panel.columns()
    assert loss_x == last_forward + 1 and xs == tuple(i + (i > last_forward) for i in range(len(t.phases)))
    (ax,) = plot_step([panel], "B").axes
    labels = [tick.get_text() for tick in ax.get_xticklabels()]
    assert labels[loss_x] == "loss" and labels[:loss_x] == [short_name(p.name) for p in t.phases[:loss_x]]
    (mark,) = [a for a in ax.get_lines() if a.get_gid() == "loss"]
    assert (list(mark.get_xdata()), list(mark.get_ydata())) == ([loss_x], [t.peak.total + 500])
    assert ax.get_ylim()[1] >= t.peak.total + 500  # the loss is never cut off
    assert Panel("ddp", t).columns() == (tuple(range(len(t.phases))), None)


def test_a_long_step_leaves_the_blocks_beside_the_turn_unnumbered():
    """The 7.5 B preset's block 32 is a multiple of BLOCK_TICKS, yet its two bars sit either side of the
    loss's column: numbering them would print over the word "loss"."""
    t = timeline(transformer_model(MODELS["7.5b"]), DeepSpeed(stage=2), 8)
    labels = Panel("z2", t).labels()
    shown = {t.phases[i].name: text for i, text in enumerate(labels) if text}
    assert "forward block 32" not in shown and "backward block 32" not in shown
    assert shown["forward block 24"] == shown["backward block 24"] == "24"
    assert shown["forward block 16"] == "16\nblocks, forward →"
    assert shown["backward block 16"] == "16\n← backward, blocks"
    assert [shown[name] for name in END_PHASES] == ["reduce", "before step", "step", "after step"]


def test_the_stack_is_the_models_parts_by_kind():
    t = timeline(TINY, DeepSpeed(stage=3, param_persistence_threshold=0), 2)
    heights = Panel("z3", t).heights("B")
    assert list(heights) == [k for k in STACK if k in heights]  # persistent states first, bottom up
    for i, phase in enumerate(t.phases):
        assert sum(row[i] for row in heights.values()) == phase.total
    assert heights["gathered parameters"][0] == 0 and max(heights["gathered parameters"]) > 0


def test_a_long_step_names_its_runs_and_its_peak_in_the_title():
    fig_panels = [Panel(f"ZeRO-{s}", timeline(BIG, DeepSpeed(stage=s), 8)) for s in (1, 2, 3)]
    fig = plot_step(fig_panels, "GB")
    for ax, panel in zip(fig.axes, fig_panels, strict=True):
        t = panel.timeline
        labels = [tick.get_text() for tick in ax.get_xticklabels()]
        assert len(labels) == len(t.phases) == 2 * 37 + 5
        named = {i: text for i, text in enumerate(labels) if text}
        numbered = [n for n in range(1, SHAPE.layers + 1) if n % BLOCK_TICKS == 0]
        ticked = [t.phases[i].name for i, text in named.items() if text.split("\n")[0].isdigit()]
        assert sorted(ticked) == sorted(
            f"{way} block {n}" for way in ("forward", "backward") for n in numbered
        )
        heads = {i: text.split("\n")[0] for i, text in named.items()}
        assert all(heads[i] == t.phases[i].name.rsplit(" ", 1)[1] for i in heads if heads[i].isdigit())
        words = {text.split("\n")[-1]: t.phases[i] for i, text in named.items() if not text.isdigit()}
        ends = ["reduce", "before step", "step", "after step"]
        assert set(words) == {"start", "blocks, forward →", "← backward, blocks", *ends}
        assert (words["blocks, forward →"].kind, words["← backward, blocks"].kind) == ("forward", "backward")
        assert [words[end].name for end in ends] == list(END_PHASES)
        upright = [tick.get_text() for tick in ax.get_xticklabels() if tick.get_rotation() == 90]
        assert upright == ends  # one bar wide each: named upright
        assert (
            ax.get_title(loc="right")
            == f"step-model peak {units.format_number(t.peak.total / 10**9, 2)} GB at {t.peak.name}"
        )
        (over,) = [a for a in ax.get_lines() if a.get_gid() == "peak bar"]
        assert list(over.get_xdata()) == [t.peak_index]
        assert not [a for a in ax.get_lines() if a.get_gid() == "measured"]  # the model alone: no markers
    fig.savefig(ARTIFACTS / "step-figure-7.5b.png", dpi=100)


def test_a_reference_level_is_drawn_where_it_is_given():
    t = timeline(TINY, DeepSpeed(stage=3), 2)  # a small model draws fast; the level is what is tested
    fig = plot_step([Panel("ZeRO-3", t, reference=("the paper: 150 B", 150)), Panel("again", t)], "B")
    (line,) = [a for a in fig.axes[0].get_lines() if a.get_gid() == "reference"]
    assert line.get_ydata()[0] == 150
    assert "the paper: 150 B" in [text.get_text() for text in fig.axes[0].texts]
    assert not [a for a in fig.axes[1].get_lines() if a.get_gid() == "reference"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: plot_step([]), "panels must be a list of 1 to 8 Panel"),
        (lambda: plot_step(["z3"]), "each panel must be a step_figure.Panel"),
        (lambda: plot_step([Panel("a", timeline(TINY, DDP(), 2))], unit="parsecs"), "unit must be one of"),
        (lambda: Panel("a", "timeline"), "timeline must be a planning Timeline"),
        (lambda: Panel("a", timeline(TINY, DDP(), 2), (1, 2)), "measured must give one value per phase (11)"),
        (lambda: Panel("a", timeline(TINY, DDP(), 2), (-1,) * 11), "measured bytes must be ≥ 0"),
        (
            lambda: Panel("a", timeline(TINY, DDP(), 2), reference=15),
            "reference must be a (label, bytes) pair",
        ),
        (lambda: Panel("a", timeline(TINY, DDP(), 2), tolerance=(1,)), "tolerance must give one value per"),
        (lambda: Panel("a", timeline(TINY, DDP(), 2), loss=-1), "loss bytes must be ≥ 0"),
        (lambda: Panel("a", timeline(TINY, DDP(), 2), on_top=("loss",)), "on_top must be a tuple of kinds"),
        (lambda: Panel("a", timeline(TINY, DDP(), 2), on_top="gradients"), "on_top must be a tuple of kinds"),
        (
            lambda: plot_step([Panel("a", timeline(TINY, DDP(), 2))], peak_mark="no"),
            "peak_mark must be True or",
        ),
    ],
)
def test_bad_input_names_the_field(make, message):
    with pytest.raises((TypeError, ValueError)) as error:
        make()
    assert message in str(error.value)


def test_knobs_that_move_the_peak_and_knobs_that_move_only_traffic():
    table = effects(BIG, 8)
    assert [r.change.knob for r in table.rows] == [c.knob for c in CHANGES]
    moved = {r.change.knob: r.moved for r in table.rows}
    # Bucket counts and the weights' all-gather split the traffic and hold no extra bytes.
    assert moved["allgather_bucket_size"] == moved["bucket_cap_mb"] == 0
    # overlap_comm adds a second bucket of reduce_bucket_size bf16 elements, under the peak.
    assert moved["overlap_comm"] == 500_000_000 * 2
    # A smaller bucket fills earlier, so the gradient partition is allocated while more activations are alive.
    assert moved["reduce_bucket_size"] > 0
    # Keeping gathered weights from forward to backward costs every layer's weights at once.
    assert moved["reshard_after_forward"] > 10 * 10**9
    # Checkpointing keeps one input per block instead of its activations.
    assert moved["activation checkpointing"] < -(10**10)
    before = timeline(BIG, DeepSpeed(stage=3), 8).peak.total
    assert table.effect("activation checkpointing").before == before
    markdown = table._repr_markdown_()
    assert markdown.count("\n") == len(CHANGES) + 1 and "| reduce_bucket_size |" in markdown
    # Every move has two decimals, so the column lines up: overlap_comm's 1 GB is "+1.00", a knob that holds
    # no byte "0.00".
    assert table.cells()[CHANGES.index(table.effect("overlap_comm").change) + 1][4] == "+1.00"
    assert {row[4] for row in table.cells()[1:] if row[1] in ("allgather_bucket_size", "bucket_cap_mb")} == {
        "0.00"
    }
    with pytest.raises(ValueError, match="knob must be one of reduce_bucket_size"):
        table.effect("bucket")


def test_the_lab_peaks_table_names_each_setups_model_peak_and_gap():
    table = peaks(fake_rows(4, extra=16), 4)
    assert [p.key for p in table.rows] == list(STEP_NAMES)
    for p in table.rows:
        t = modelled(BY_KEY[p.key], 4)
        assert (p.phase, p.model) == (t.peak.name, t.peak.total)
        assert p.gap == 16 and p.tolerance == sum(n for _, n in allowances(BY_KEY[p.key], t.peak.kind))
    assert len(table.cells()) == 1 + len(STEP_NAMES) and {row[5] for row in table.cells()[1:]} == {"yes"}
    # The tolerance's parts by short name, each once per row, with bytes that add up to it; no row names
    # DeepSpeed's buffers for a PyTorch setup.
    for p, row in zip(table.rows, table.cells()[1:], strict=True):
        assert row[6] == " + ".join(f"{name} {n:,}" for name, n in p.named)
        assert {name for name, _ in p.named} <= set(WHY) and sum(n for _, n in p.named) == p.tolerance
        if p.key in ("step_ddp", "step_fsdp"):
            assert not {"gloo bucket", "last gradients", "flattened copy"} & {name for name, _ in p.named}
    over = peaks(fake_rows(4, extra=10**6), 4)  # far past every tolerance
    assert {row[5] for row in over.cells()[1:]} == {"NO"}
    with pytest.raises(ValueError, match="no measured timeline of step_ddp on 2 ranks"):
        peaks(fake_rows(4), 2)


def test_highest_is_the_busiest_ranks_most_at_a_phase_or_over_the_step():
    rows = fake_rows(2, extra=100)
    t = modelled(BY_KEY["step_zero3"], 2)
    assert highest(rows, "step_zero3", 2, "before optimizer step") == t.phase("before optimizer step").total
    assert highest(rows, "step_zero3", 2, t.peak.name) == t.peak.total + 100
    assert highest(rows, "step_zero3", 2) == max(p.total + (p.kind != "boundary") * 100 for p in t.phases)
    with pytest.raises(ValueError, match="phase must be one of start of step, forward linear 1"):
        highest(rows, "step_zero3", 2, "forward layer 1")


def test_tables_show_exact_bytes_rounded_only_for_display():
    t = timeline(BIG, DeepSpeed(stage=3), 8, checkpointing=True)
    parts = parts_table(t.peak)
    assert len(parts.body) == len(t.peak.parts) + 1 and parts.body[-1][:2] == ("total", "21.507")
    kinds = [row[0] for row in parts.body[:-1] if row[0]]
    assert kinds[0] == "optimizer" and sorted(kinds) == sorted({p.kind for p in t.peak.parts})
    # Every GB value has three decimals, so the column lines up (1 GB is "1.000", not "1").
    assert all(len(row[1].partition(".")[2]) == 3 for row in parts.body)
    # Parts of one kind sit together under the kind's name, written once: the lab's ZeRO-3 peak holds gathered
    # parameters for three reasons. Counts in the reasons are exact ("4,224", never "4.224K").
    lab = parts_table(modelled(BY_KEY["step_zero3"], 2).peak, "B")
    names = [row[0] for row in lab.body]
    first = names.index("gathered parameters")
    assert names.count("gathered parameters") == 1 and names[first + 1 : first + 3] == ["", ""]
    assert names[first + 3] != "" and [row[1] for row in lab.body[first : first + 3]] == [
        "6,336",
        "4,224",
        "2,048",
    ]
    assert lab.body[0][2].endswith("12 B × 4,224 / 2") and not any("K" in row[2] for row in lab.body)
    # Each row names exactly the tensors its bytes count: only linear 4's weight is prefetched and copied out;
    # linear 1's weight and linear 4's bias, prefetched too, are still only in their all-gather buffer.
    buffers, kept, ready = (row[2] for row in lab.body[first : first + 3])
    assert ready.endswith(": linear 4's 1,024-element tensor: 2 B × 1,024")
    assert kept.endswith(": linear 2 to linear 3: 2 B × 2,112")
    assert buffers.endswith("prefetched: linear 1's 1,024-element tensor and linear 4's 32-element tensor")
    # Model state: the paper's ZeRO-3 share, plus the small tensors (≤ 100,000 elements) kept whole.
    small = sum(n for layer in BIG.layers for n in layer.tensors if n <= 100_000)
    state = memory.per_gpu(BIG.params, 8, Stage.ZERO3).total + 2 * small
    shown = [units.format_number(units.in_unit(b, "GB"), 3) for b in (state, t.peak.total)]
    rest = f"{float(Fraction(shown[1]) - Fraction(shown[0])):.3f}"  # the shown numbers' difference
    assert abs(Fraction(rest) - units.in_unit(t.peak.total - state, "GB")) <= Fraction(1, 1000)
    summary = peak_table([t])
    # Stage 3 holds the same model state all step, so before the optimizer step and at the peak agree.
    row = ("DeepSpeed ZeRO-3", "8", "on", shown[0], "optimizer step", shown[1], shown[0], rest)
    assert summary.body == (row,)
    assert "| --: |" in summary._repr_markdown_() and "<td>optimizer step</td>" in summary._repr_html_()
    with pytest.raises(TypeError, match="timelines must be a non-empty list of Timeline"):
        peak_table([])
    # With a loss: the peak counts it; checkpointed, a small loss leaves the peak be, under a new heading.
    lossy = peak_table([t], loss=10**9)
    assert lossy.head[5] == "peak (loss counted) GB" and len(lossy.head) == 8 and lossy.body == (row,)
    assert t.peak_with_loss(10**9) == t.peak.total  # the optimizer step still tops the forward pass plus 1 GB
    bare = timeline(BIG, DeepSpeed(stage=3), 8)  # no checkpointing: a large loss tops the backward pass
    (topped,) = peak_table([bare], "B", loss=10**10).body
    after = bare.after_forward
    assert topped[4:6] == ("the loss", f"{after.total + 10**10:,}")  # whole bytes, exact
    assert topped[6] == f"{after.model_state:,}"
    with pytest.raises(ValueError, match="loss must be"):
        peak_table([t], loss=-1)


def test_the_kinds_table_sets_two_peaks_side_by_side_and_each_row_adds_up():
    # The lab's peaks on 2 ranks (Ψ = 4,224), worked by hand: ZeRO-2 at its optimizer step holds the whole
    # bf16 weights (2Ψ), its bf16 gradient shard (2Ψ/2), their fp32 copy (4Ψ/2) and a flattened copy (2Ψ/2);
    # ZeRO-3 at forward relu 3 holds a weight shard (2Ψ/2), its gradient partition from start-up, 6,304
    # gathered elements (lesson 12, section 4), three 2,048-byte activations and its 1,200-element bucket.
    psi = 4_224
    z2, z3 = (modelled(BY_KEY[key], 2).peak for key in ("step_zero2", "step_zero3"))
    table = kinds_table({"ZeRO-2": z2, "ZeRO-3": z3}, "B")
    assert table.head == ("kind", "ZeRO-2 B", "ZeRO-3 B", "ZeRO-3 − ZeRO-2 B")
    hand = {
        "optimizer": (12 * psi // 2, 12 * psi // 2),
        "gradients": (2 * psi // 2, 2 * psi // 2),
        "weights": (2 * psi, 2 * psi // 2),
        "activations": (0, 3 * 2_048),
        "gathered parameters": (0, 2 * 6_304),
        "gradient buckets": (0, 2 * 1_200),
        "fp32 gradients": (4 * psi // 2, 0),
        "optimizer temporaries": (2 * psi // 2, 0),
    }
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    rows = {row[0]: tuple(number(cell) for cell in row[1:]) for row in table.body}
    assert list(rows) == [*hand, "total"]  # kinds in KINDS order, only those held, then the total
    for kind, (two, three) in hand.items():
        assert rows[kind] == (two, three, three - two)
    assert rows["total"] == (z2.total, z3.total, z3.total - z2.total) == (50_688, 54_944, 4_256)
    assert table.body[3][3] == "+6,144" and table.body[2][3] == "-4,224" and table.body[0][3] == "0"
    # Rounded to thousandths of a GB, the last column is the difference of the two shown, so a row adds up.
    big = [timeline(BIG, DeepSpeed(stage=s), 8).peak for s in (2, 3)]
    for row in kinds_table({"2": big[0], "3": big[1]}).body:
        two, three, change = (Fraction(cell) for cell in row[1:])
        assert three - two == change
    assert kinds_table({"alone": z3}).head == ("kind", "alone GB")  # no difference for one phase
    with pytest.raises(TypeError, match="phases must be a non-empty dict of label -> Phase"):
        kinds_table([z2, z3])
    with pytest.raises(TypeError, match=r"phases\['ZeRO-3'\] must be a planning Phase"):
        kinds_table({"ZeRO-3": modelled(BY_KEY["step_zero3"], 2)})


def test_the_peak_table_splits_the_peak_at_the_peak_itself():
    # DeepSpeed's stage 2 allocates its gradient partition at the first reduction, after its peak at the last
    # block's backward: the model state there is the weights and the optimizer shard only, 2Ψ + 12Ψ/N, below
    # the paper's stage-2 figure that it holds before the optimizer step. The last two columns add up to the
    # peak, so a reader's subtraction works.
    t = timeline(BIG, DeepSpeed(stage=2), 8)
    psi = BIG.params
    at_peak = 2 * psi + Fraction(12 * psi, 8)
    paper = memory.per_gpu(psi, 8, Stage.ZERO2).total
    assert t.peak.name == "backward block 36" and t.peak.model_state == at_peak < paper
    (row,) = peak_table([t], "B").body
    head = peak_table([t], "B").head
    cells = dict(zip(head, row, strict=True))
    number = lambda text: Fraction(text.replace(",", ""))  # noqa: E731
    assert number(cells["model state before optimizer step B"]) == paper
    assert number(cells["model state at the peak B"]) == at_peak
    beyond = number(cells["beyond model state at the peak B"])
    assert beyond + number(cells["model state at the peak B"]) == number(cells["peak B"]) == t.peak.total
    # Rounded to thousandths of a GB, a row still adds up as printed, and its last column stays within
    # 0.001 GB of the exact bytes beyond the model state.
    lines = [timeline(BIG, DeepSpeed(stage=s), 8) for s in (1, 2, 3)]
    for line, row in zip(lines, peak_table(lines).body, strict=True):
        peak, state, beyond = (Fraction(cell) for cell in row[5:])
        exact = Fraction(line.peak.total - line.peak.model_state, 10**9)
        assert state + beyond == peak and abs(beyond - exact) <= Fraction(1, 1000)


def test_same_scale_gives_every_panel_the_tallest_panels_range():
    shown = panels(fake_rows(2, extra=32), 2)
    own = [ax.get_ylim() for ax in plot_step(shown, "kB").axes]
    assert len({top for _, top in own}) > 1  # the panels' own ranges differ
    shared = [ax.get_ylim() for ax in plot_step(shown, "kB", same_scale=True).axes]
    assert shared == [(0, max(top for _, top in own))] * len(own)
    with pytest.raises(TypeError, match="same_scale must be True or False"):
        plot_step(shown, "kB", same_scale="yes")


def test_the_measured_table_rounds_the_measurement_and_its_difference_adds_up():
    from zero_lessons.present.step_tables import measured_table

    table = measured_table(
        [("ZeRO-3", "forward relu 3", 54_944, 56_992, 2_112), ("DDP", "step", 100, 104, 64)]
    )
    assert table.head[2:] == (
        "step model kB",
        "measured at that phase, kB",
        "measured − step model kB",
        "tolerance kB",
    )
    assert table.body[0] == ("ZeRO-3", "forward relu 3", "54.9", "57.0", "2.1", "2.1")
    assert table.body[1][2:] == ("0.1", "0.1", "0.0", "0.1")  # 4 bytes more is not shown to 0.1 kB
    assert measured_table([("DDP", "step", 100, 104, 64)], "B", 0).body[0][2:] == ("100", "104", "4", "64")
    in_bytes = measured_table(
        [("ZeRO-3", "forward relu 3", 54_944, 56_992, 2_112), ("Z2", "s", 100, 112, 64)], gap_step=64
    )
    assert in_bytes.head[4:] == ("measured − step model B, to the nearest 64", "tolerance B")
    assert in_bytes.body[0][2:] == ("54.9", "57.0", "2,048", "2,112")
    assert in_bytes.body[1][4:] == ("0", "64")  # 12 bytes of scalars: not a gap at 64-byte steps
    with pytest.raises((TypeError, ValueError)):
        measured_table([("DDP", "step", 100, 104, 64)], gap_step=0)
    with pytest.raises(TypeError, match="rows must be"):
        measured_table([("DDP", "step", 1)])
    with pytest.raises(TypeError, match="rows must be"):
        measured_table([])


def test_the_text_table_shows_numbers_with_separators_and_right_aligns_number_columns():
    from zero_lessons.present.step_tables import text_table

    table = text_table(("setup", "bytes", "GB"), [("FSDP2", 13_728, 0.41), ("ZeRO-3", 16_896, 1.65)])
    assert table.body == (("FSDP2", "13,728", "0.41"), ("ZeRO-3", "16,896", "1.65"))
    assert table.numeric == (False, True, True)
    assert "| --- | --: | --: |" in table._repr_markdown_()
    with pytest.raises(TypeError, match="each row must be 3 texts or numbers"):
        text_table(("a", "b", "c"), [("x", 1)])
    with pytest.raises(TypeError, match="each row must be 1 texts or numbers"):
        text_table(("a",), [(True,)])
    with pytest.raises(TypeError, match="head and rows must be"):
        text_table((), [("x",)])


def test_a_loss_after_the_forward_pass_can_take_the_peak_and_shrink_a_knobs_move():
    """Counting a loss held after the forward pass: the peak is the larger of that and the step model's own;
    a knob that acts in the backward pass then moves the peak only by what rises above the loss's."""
    loss = 2 * 10**9
    base = timeline(BIG, DeepSpeed(stage=2), 8)
    assert (
        base.after_forward.kind == "forward"
        and base.after_forward is [p for p in base.phases if p.kind == "forward"][-1]
    )
    assert base.peak_with_loss(0) == base.peak.total
    assert base.peak_with_loss(loss) == max(base.peak.total, base.after_forward.total + loss)
    bare, lossy = effects(BIG, 8), effects(BIG, 8, loss=loss)
    assert lossy.loss == loss and bare.loss == 0 and "peak GB (loss counted)" in lossy.cells()[0]
    for plain, counted in zip(bare.rows, lossy.rows, strict=True):
        ck_before, ck_after = plain.change.checkpointing
        for fw, ck, value in (
            (plain.change.before, ck_before, counted.before),
            (plain.change.after, ck_after, counted.after),
        ):
            assert value == timeline(BIG, fw, 8, checkpointing=ck).peak_with_loss(loss)
    overlap = lossy.effect("overlap_comm")
    assert overlap.before == base.after_forward.total + loss > base.peak.total  # the loss is stage 2's peak
    assert (
        0 < overlap.moved < bare.effect("overlap_comm").moved
    )  # the second bucket rises above it only partly
    with pytest.raises(ValueError, match="loss must be"):
        base.peak_with_loss(-1)


def test_the_knob_table_says_what_each_knob_trades_and_keeps_the_peaks():
    from zero_lessons.present.step_tables import TRADES, knob_table

    knobs = effects(BIG, 8)
    table = knob_table(knobs)
    head, *body = knobs.cells()
    assert table.head == (*head[:5], "what it trades")
    assert [r[:5] for r in table.body] == [tuple(r[:5]) for r in body]
    assert {r[1] for r in table.body} == set(TRADES)  # every knob of CHANGES has its words
    ddp = next(r for r in table.body if r[1] == "bucket_cap_mb")
    assert ddp[4] == "0.00" and "DDP keeps a bucket for every gradient" in ddp[5]
    with pytest.raises(TypeError, match="effects"):
        knob_table("knobs")


def test_a_floor_starts_every_y_axis_above_zero_and_must_stay_below_the_top():
    """Lesson 12's ZeRO-2 panel alone starts at 30 kB, so its buffers above the model state can be read."""
    panel = Panel("ZeRO-2", timeline(TINY, DeepSpeed(stage=2), 2))
    top = plot_step([panel], "B").axes[0].get_ylim()[1]
    cut = plot_step([panel], "B", floor=top / 2).axes[0]
    assert cut.get_ylim() == (top / 2, top)
    assert cut_marks(cut) == 2 and cut_marks(plot_step([panel], "B").axes[0]) == 0  # marked only when cut
    shown = [t for t in cut.get_yticks() if top / 2 <= t <= top]
    assert len(shown) >= 4  # a cut axis is read by its ticks, so it gets several
    with pytest.raises(ValueError, match="floor must be below the panel's top"):
        plot_step([panel], "B", floor=top * 2)
    with pytest.raises((TypeError, ValueError), match="floor"):
        plot_step([panel], "B", floor=-1)


def test_a_floored_legend_says_which_model_state_lies_under_the_floor():
    """Below the floor the reader sees no colour: a floor just above the weights (the bottom of every bar)
    names them "under the cut", so the reader knows they are there; a floor at 0 names them plainly."""
    panel = Panel("ZeRO-2", timeline(TINY, DeepSpeed(stage=2), 2))
    weights = max(panel.heights("B")["weights"])
    names = [
        t.get_text() for t in plot_step([panel], "B", floor=float(weights) * 1.01).legends[0].get_texts()
    ]
    assert "weights" not in names and "weights (under the cut)" in names and "optimizer state" in names
    plain = [t.get_text() for t in plot_step([panel], "B").legends[0].get_texts()]
    assert "weights" in plain and not any("under the cut" in name for name in plain)


def test_a_floor_draws_what_grows_under_it_on_top_and_writes_what_stays_hidden():
    """Lesson 12's ZeRO-2 panel from 30 kB: the gradient partition arrives under the cut, where it would seem
    to lift the optimizer state; the floored figure draws it on top of its bars instead, and without a floor
    it stays in its place. What a lift cannot show (a bar wholly under the cut) is written at its foot."""
    from zero_lessons.present.step_floor import lift, note_rises, rises

    panel = Panel("ZeRO-2", timeline(TINY, DeepSpeed(stage=2), 2))
    partition = max(panel.heights("B")["gradients"])
    cut = float(max(panel.heights("B")["weights"]) + partition) + 1  # the weights and the partition under it
    found = rises(panel, "B", cut, range(len(panel.timeline.phases)))
    assert len(found) == 1 and list(found.values())[0] == (partition, ("gradients",))
    (phase,) = found
    assert phase == next(i for i, g in enumerate(panel.heights("B")["gradients"]) if g)  # where it arrives
    totals = [float(p.total) for p in panel.timeline.phases]
    for floor, on_top in ((cut, True), (0, False)):
        ax = plot_step([panel], "B", floor=floor).axes[0]
        parts = [p for p in ax.patches if p.get_gid() == "gradients"]
        at_top = [abs(p.get_y() + p.get_height() - totals[round(p.get_x() + 0.36)]) < 1e-6 for p in parts]
        held = sum(1 for g in panel.heights("B")["gradients"] if g)  # a phase without them draws no rectangle
        assert len(parts) == held and all(at_top) is on_top
        assert not [t for t in ax.texts if "below the axis" in t.get_text()]  # nothing left hidden
    fig, ax = plt.subplots()
    high = max(totals) + 1  # every bar wholly under the cut: lifting shows nothing, so the rise is written
    assert rises(lift(panel, "B", cut), "B", cut, range(len(totals))) == {}
    note_rises(ax, panel, "B", high, list(enumerate(range(len(totals)))))
    notes = [t for t in ax.texts if "below the axis" in t.get_text()]
    assert any(n.get_position() == (phase, high) and "gradients" in n.get_text() for n in notes)
    plt.close(fig)


def test_a_lone_panel_is_drawn_as_tall_as_two_so_its_thin_bands_show():
    panel = Panel("TINY on 2 ranks", timeline(TINY, DeepSpeed(stage=2), 2))
    one, two = plot_step([panel], "B"), plot_step([panel, panel], "B")
    assert tuple(one.get_size_inches()) == tuple(two.get_size_inches())
    three = plot_step([panel] * 3, "B")
    assert three.get_size_inches()[1] > two.get_size_inches()[1]  # more panels, taller
    for fig in (one, two, three):
        plt.close(fig)


def test_the_gathered_table_splits_stage_3s_gathered_weights_by_holder():
    from zero_lessons.planning.step_zero3 import HOLDERS, holder
    from zero_lessons.present.step_tables import gathered_table

    z3 = modelled(BY_KEY["step_zero3"], 2)
    names = ["forward linear 1", "forward relu 3", "backward linear 4"]
    table = gathered_table({name: z3.phase(name) for name in names})
    assert table.head[-1] == "in all, B" and [row[0] for row in table.body] == names
    for row, name in zip(table.body, names, strict=True):
        parts = [p for p in z3.phase(name).parts if p.kind == "gathered parameters"]
        assert {holder(p) for p in parts} <= set(HOLDERS)
        split = [int(v.replace(",", "")) for v in row[1:5]]
        assert sum(split) == int(row[5].replace(",", "")) == z3.phase(name).bytes_of("gathered parameters")
    # at ReLU 3: linear 4's weight copied out, linears 2 and 3 kept, two all-gather buffers, no own weights
    assert table.body[1][1:] == ("0", "2,048", "4,224", "6,336", "12,608")
    in_gb = gathered_table({"peak": z3.peak}, "kB")
    assert in_gb.head[-1] == "in all, kB" and in_gb.body[0][-1] == "12.608"
    with pytest.raises(TypeError, match="phases must be a non-empty dict"):
        gathered_table([z3.peak])
    with pytest.raises(TypeError, match="phases"):
        gathered_table({"peak": z3})


def test_a_part_names_its_holder_from_a_fixed_list():
    from zero_lessons.planning.step_parts import HOLDERS, Part

    assert Part("weights", 2, "a shard").holder == "own" == HOLDERS[0]
    with pytest.raises(ValueError, match="holder must be one of own, prefetched, kept, buffers, got 'lent'"):
        Part("gathered parameters", 2, "a weight", "lent")
