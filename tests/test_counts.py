"""The four counts of lesson 07, each checked against its own reference for the article's 7.5 B on 8 GPUs."""

import pathlib
from fractions import Fraction

import pytest

from conftest import need_module
from zero_lessons import GB, memory, units
from zero_lessons.planning import counts, ds_estimator, offload
from zero_lessons.stages import Stage

PSI = 7_500_000_000


def test_each_count_gives_the_figures_worked_by_hand():
    paper, package, code, estimator = counts.four(PSI, 8)
    assert paper.gpu == Fraction("28.125") * GB  # the article: 2Ψ + 14Ψ/8
    assert (paper.gpu_offloaded, paper.host, paper.pcie) == (None, None, None)
    # DeepSpeed's comment: 2 whole + 18 split; offloaded, 2 on the GPU and max(4 × 8, 16) × 1.5 on the host
    assert (estimator.gpu, estimator.gpu_offloaded) == (Fraction("31.875") * GB, 15 * GB)
    assert (estimator.host, estimator.pcie) == (360 * GB, None)
    # the ZeRO-Offload paper's split: 2 on the GPU, 14 per GPU on the host; 2 + 2 B per shard element on PCIe
    assert (package.gpu, package.gpu_offloaded, package.host) == (paper.gpu, 15 * GB, 105 * GB)
    assert package.pcie == Fraction("3.75") * GB
    # DeepSpeed's code: on the host 4 + 4 + 8 + 2 B per shard element; the gradient shard down in fp32 (4) and
    # the weight shard back (2)
    assert (code.gpu, code.gpu_offloaded, code.host) == (None, 15 * GB, 18 * PSI)
    assert code.pcie == Fraction("5.625") * GB


def test_deepspeed_pcie_bytes_per_shard_element_by_stage():
    shard = PSI // 8
    assert [offload.deepspeed_pcie_bytes(PSI, 8, stage) for stage in (1, 2, 3)] == [6 * shard] * 2 + [
        10 * shard
    ]
    with pytest.raises(ValueError, match="offload needs a partitioned optimizer"):
        offload.deepspeed_pcie_bytes(PSI, 8, 0)


def test_the_estimators_row_is_deepspeeds_own_function():
    s12 = need_module("deepspeed.runtime.zero.stage_1_and_2")
    estimator = counts.four(PSI, 8)[3]
    for cpu_offload, gpu in ((False, estimator.gpu), (True, estimator.gpu_offloaded)):
        cpu_bytes, gpu_bytes = s12.estimate_zero2_model_states_mem_needs(PSI, 8, 1, cpu_offload)
        assert gpu_bytes == gpu
    assert cpu_bytes == estimator.host


def test_the_table_names_each_count_once_with_a_dash_where_it_gives_no_figure():
    lines = counts.table(PSI, 8).splitlines()
    assert len(lines) == 2 + 4 and lines[0].startswith("| count | per GPU, no offload |")
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines[2:]]
    assert [row[0].split("**")[1] for row in cells] == list(counts.INCLUDES)
    assert lines[2].endswith("| 28.125 GB | — | — | — |") and lines[4].endswith(
        "| — | 15 GB | 135 GB | 5.625 GB |"
    )
    # the estimator's row shows DeepSpeed's figures in decimal GB (31.875), not as it prints them (29.69 "GB")
    assert "| 31.875 GB |" in lines[5] and "29.69" not in lines[5]


def test_the_overview_says_what_each_count_includes_in_the_tables_order():
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in counts.OVERVIEW.splitlines()[2:]]
    assert [row[0].split("**")[1] for row in cells] == list(counts.INCLUDES)[1:]  # the paper has no offload
    assert [row[1] for row in cells] == list(counts.INCLUDES.values())[1:]
    assert "decimal GB" in cells[2][1] and "once the model is partitioned" in cells[1][1]


def test_what_each_count_includes_names_contents_not_figures():
    words = " ".join(counts.INCLUDES.values())
    for name in ("16-bit", "fp32"):  # names, not figures
        words = words.replace(name, "")
    assert not any(char.isdigit() for char in words.replace("lesson 06", ""))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: counts.four(PSI, 2048), ValueError, "gpus must be"),
        (lambda: counts.four(PSI, 0), ValueError, "gpus must be"),
        (lambda: counts.Count("my count", None, None, None, None), ValueError, "name must be one of"),
    ],
)
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_deepspeeds_zero2_host_state_is_18_bytes_per_shard_element_from_buffers_its_source_names():
    assert offload.DEEPSPEED_ZERO2_HOST == {
        "fp32 master weights": 4,
        "fp32 gradients": 4,
        "Adam moments": 8,
        "16-bit weights": 2,
    }
    assert offload.deepspeed_zero2_host(PSI, 8) == 18 * PSI / 8 == Fraction("16.875") * GB
    assert offload.deepspeed_zero2_host(PSI, 8) > offload.offloaded(PSI, 8, 2)[1].total  # the package's 14
    s12 = need_module("deepspeed.runtime.zero.stage_1_and_2")
    source = pathlib.Path(s12.__file__).read_text()
    for name in ("single_partition_of_fp32_groups", "param_buffer_of_bit16_for_cpu_offload_groups"):
        assert f"self.{name}" in source  # the buffers the reading names, in this DeepSpeed's code


def test_the_bytes_table_places_what_each_counts_own_function_counts():
    """Each row of `counts.PLACES`, summed by place, against the function its count comes from."""
    n = 8
    by_place = {}
    for name, cells, _ in counts.PLACES:
        sums = {"GPU": 0, "÷ N": 0, "host": 0}
        for size, where in cells.values():
            for part in where.replace("*", "").split(", "):  # "GPU, 2 host": 2 on the GPU and 2 on the host
                place = part.split(" ", 1)[1] if part[0].isdigit() else part
                sums[place] += int(part.split(" ")[0]) if part[0].isdigit() else size
        by_place[name] = sums
    gpu = {name: (s["GPU"] * PSI + Fraction(s["÷ N"] * PSI, n)) for name, s in by_place.items()}
    host = {name: s["host"] * PSI for name, s in by_place.items()}  # every shard of a node of n GPUs
    assert gpu["the ZeRO paper"] == memory.per_gpu(PSI, n, 2).total
    assert gpu["DeepSpeed's estimator"] == ds_estimator.zero2(PSI, n, cpu_offload=False).gpu_bytes
    on, off = offload.offloaded(PSI, n, 2)
    assert gpu["the package's count, optimizer offloaded"] == on.total
    assert host["the package's count, optimizer offloaded"] == n * off.total
    assert gpu["DeepSpeed's estimator, optimizer offloaded"] == ds_estimator.zero2(PSI, n).gpu_bytes
    single = ds_estimator.zero2(PSI, 1).cpu_bytes  # one GPU: max(4 × 1, 16) = 16, the offloaded state × 1.5
    assert host["DeepSpeed's estimator, optimizer offloaded"] * 3 // 2 == single
    assert host["DeepSpeed's code, optimizer offloaded"] == n * offload.deepspeed_zero2_host(PSI, n)
    for params in (False, True):
        name = f"DeepSpeed's code, ZeRO-3, optimizer{' and parameters' * params} offloaded"
        assert host[name] == n * offload.deepspeed_zero3_host(PSI, n, parameters=params)
        assert gpu[name] == (0 if params else offload.offloaded(PSI, n, 3)[0].total)  # the weight shard
    for params in (False, True):
        name = f"the package's count, ZeRO-3, optimizer{' and parameters' * params} offloaded"
        on, off = offload.offloaded(PSI, n, 3, parameters=params)
        assert gpu[name] == on.total and host[name] == n * off.total
    assert gpu["the ZeRO paper, ZeRO-3"] == memory.per_gpu(PSI, n, 3).total
    plain = ds_estimator.zero3(PSI, 0, n, cpu_offload=False, cpu_offload_params=False)  # no layer
    assert gpu["DeepSpeed's estimator, ZeRO-3"] == plain.gpu_bytes
    # no layer; zero.Init and the optimizer offloaded, the defaults
    three = ds_estimator.zero3(PSI, 0, n, cpu_offload_params=False)
    assert gpu["DeepSpeed's estimator, ZeRO-3, optimizer offloaded"] == three.gpu_bytes
    assert host["DeepSpeed's estimator, ZeRO-3, optimizer offloaded"] * 3 // 2 == three.cpu_bytes
    both = ds_estimator.zero3(PSI, 0, n)  # the parameters offloaded too
    name = "DeepSpeed's estimator, ZeRO-3, optimizer and parameters offloaded"
    assert gpu[name] == both.gpu_bytes == 0 and host[name] * 3 // 2 == both.cpu_bytes
    assert max(16, 4 * n) * PSI * 3 // 2 == ds_estimator.zero2(PSI, n).cpu_bytes  # the also column's formula
    assert counts.bytes_table().count("\n") == len(counts.PLACES) + 1


def test_the_bytes_table_shows_the_rows_named_in_their_order():
    shown = counts.bytes_table(counts.NO_OFFLOAD)
    assert shown.count("\n") == len(counts.NO_OFFLOAD) + 1 and "offloaded" not in shown
    assert counts.bytes_table(("DeepSpeed's estimator", "the ZeRO paper")) == counts.bytes_table(
        ("the ZeRO paper", "DeepSpeed's estimator")
    )  # always in PLACES' order
    offloaded = counts.bytes_table(counts.OFFLOADED)
    assert offloaded.count("\n") == len(counts.OFFLOADED) + 1 == 10 and "**the ZeRO paper**" not in offloaded


@pytest.mark.parametrize(
    "names, error, words",
    [
        ("the ZeRO paper", TypeError, "names must be a tuple of row names"),
        (3, TypeError, "names must be a tuple of row names"),
        (("my count",), ValueError, "names must be one of the ZeRO paper, DeepSpeed's estimator"),
        ((None,), TypeError, "names must be one of"),
    ],
)
def test_the_bytes_table_refuses_unknown_rows(names, error, words):
    with pytest.raises(error, match=words):
        counts.bytes_table(names)


def test_deepspeed_s_stage_3_host_code_count_names_buffers_its_code_has():
    """By our reading of stage3.py: 18 B per shard element, optimizer offloaded; 20 with the parameters."""
    assert offload.deepspeed_zero3_host(PSI, 8) == 18 * PSI / 8 == Fraction("16.875") * GB
    assert offload.deepspeed_zero3_host(PSI, 8, parameters=True) == 20 * PSI / 8
    assert offload.deepspeed_zero3_host(PSI, 8) > offload.offloaded(PSI, 8, 3)[1].total  # the package's 14
    stage3 = need_module("deepspeed.runtime.zero.stage3")
    source = pathlib.Path(stage3.__file__).read_text()
    for name in ("grad_partitions_flat_buffer", "fp32_partitioned_groups_flat"):
        assert f"self.{name}" in source  # the buffers the reading names, in this DeepSpeed's code
    with pytest.raises(TypeError, match="parameters must be"):
        offload.deepspeed_zero3_host(PSI, 8, parameters="yes")


def test_lesson_07s_fold_names_only_what_the_installed_deepspeed_has():
    """Each `name` the fold lists under a DeepSpeed file is defined or assigned in that file, and the
    version it names is the one installed."""
    import json
    import re

    lesson = pathlib.Path(__file__).parent.parent / "notebooks" / "07_offload.ipynb"
    cells = ["".join(cell["source"]) for cell in json.loads(lesson.read_text())["cells"]]
    (fold,) = [c for c in cells if "where these bytes are in DeepSpeed's code</summary>" in c]
    fold = fold.split("</summary>")[1].split("</details>")[0]
    deepspeed = need_module("deepspeed")
    assert f"DeepSpeed {deepspeed.__version__}" in fold
    parts = re.split(r"`(stage_1_and_2|stage3)\.py`", fold)
    assert len(parts) == 5  # each file named once, its names after it
    for module, text in zip(parts[1::2], parts[2::2], strict=True):
        source = pathlib.Path(need_module(f"deepspeed.runtime.zero.{module}").__file__).read_text()
        names = [n for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text) if "_" in n]
        assert len(names) >= 3, (module, names)
        for name in names:
            assert re.search(rf"(def {name}\(|self\.{name}\b)", source), (module, name)


def test_the_bytes_table_sums_each_row_s_host_bytes_when_any_row_has_some():
    zero2 = counts.bytes_table(counts.OFFLOADED_ZERO2).splitlines()
    assert zero2[0].split(" | ")[-2] == "on the host"
    assert [line.split(" | ")[-2] for line in zero2[2:]] == [
        "14",
        "18",
        "16* × 1.5",
    ]  # package, code, estimator: the order of the host table's columns
    zero3 = counts.bytes_table(counts.OFFLOADED_ZERO3).splitlines()
    assert zero3[0].startswith("| count (ZeRO-3) |") and zero2[0].startswith("| count (ZeRO-2) |")
    assert counts.bytes_table(counts.NO_OFFLOAD).startswith("| count (ZeRO-2 unless named) |")  # both stages
    assert [line.split(" | ")[-2] for line in zero3[2:]] == ["14", "18", "16* × 1.5", "16", "20", "18* × 1.5"]
    assert "on the host" not in counts.bytes_table(counts.NO_OFFLOAD)  # nothing there: no column
    assert counts.OFFLOADED == counts.OFFLOADED_ZERO2 + counts.OFFLOADED_ZERO3


def test_the_host_table_sets_three_counts_side_by_side_per_offload():
    """Each cell against the function its count comes from, on one node of 8 and of 4."""
    cases = ((8, ("—", "24", "27"), ("48", "48", "48")), (4, ("—", "24", "27"), ("24", "24", "27")))
    for gpus, estimator, without in cases:
        rows = [line.split(" | ") for line in counts.host_table(PSI, gpus).splitlines()[2:]]
        assert [r[0].lstrip("| ") for r in rows] == [
            "ZeRO-2, optimizer offloaded",
            "ZeRO-3, optimizer offloaded",
            "ZeRO-3, optimizer and parameters offloaded",
        ]
        assert [r[1].split(" (")[0] for r in rows] == ["14", "14", "16"]  # the package's count
        assert [r[2].split(" (")[0] for r in rows] == ["18", "18", "20"]  # DeepSpeed's code
        assert [r[3].split(" (")[0] for r in rows] == list(estimator)  # with zero.Init: stage 3 only
        assert [r[4].split(" (")[0] for r in rows] == list(
            without
        )  # stage 3 without zero.Init: max(4 × GPUs, 16 or 18)
    eight = counts.host_table(PSI, 8)
    assert "48 (360 GB)" in eight and "14 (105 GB)" in eight and "27 (202.5 GB)" in eight
    assert (
        eight.splitlines()[2].split(" | ")[3] == "—"
    )  # zero.Init is stage 3's: ZeRO-2 has one estimator line
    assert f"{units.format_bytes(8 * offload.deepspeed_zero3_host(PSI, 8, parameters=True))})" in eight


def test_the_pcie_table_sets_the_design_beside_deepspeeds_code():
    """4 B of the design per shard element (2 down, 2 back; 4 to 6 with the parameters offloaded) against
    DeepSpeed's 6 and 10, and 10 to 12 with the parameters offloaded (stage 3's 8 B of gradient trips, a
    16-bit fetch for the forward pass and at most one for the backward); Ψ/8 elements at 25 GB/s, each cell
    against its function."""
    rows = [line.split(" | ") for line in counts.pcie_table(PSI, 8, "25 GB/s").splitlines()[2:]]
    assert [r[1] for r in rows] == [
        "4 B: 3.75 GB, 0.15 s",
        "4 B: 3.75 GB, 0.15 s",
        "4 to 6 B: 3.75 GB to 5.625 GB, 0.15 to 0.225 s",
    ]
    assert [r[2].rstrip(" |") for r in rows] == [
        "6 B: 5.625 GB, 0.225 s",
        "10 B: 9.375 GB, 0.375 s",
        "10 to 12 B: 9.375 GB to 11.25 GB, 0.375 to 0.45 s",
    ]
    assert counts.PARAMS_PCIE == (8 + 2, 8 + 2 + 2)
    assert offload.DEEPSPEED_PCIE[Stage.ZERO3] - offload.DEEPSPEED_BACK == 2 + 2 + 4  # the gradients' trips
    code = offload.deepspeed_pcie_bytes(PSI, 8, Stage.ZERO3)
    assert f"{units.format_bytes(code)}, {units.format_number(code / (25 * GB))} s" in rows[1][2]
    design = offload.link_bytes(PSI, 8, Stage.ZERO3, parameters=True)
    assert rows[2][1].endswith(
        f"to {units.format_bytes(design)}, 0.15 to {units.format_number(design / (25 * GB))} s"
    )
    assert design == 6 * PSI // 8  # the most: the gradient down, the weights up for each pass
    assert "at 100 GB/s (" in counts.pcie_table(PSI, 16, 10**11).splitlines()[0]


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: counts.pcie_table(PSI, 8, "fast"), ValueError, "bandwidth"),
        (lambda: counts.pcie_table(PSI, 0, "25 GB/s"), ValueError, "gpus must be"),
        (lambda: counts.pcie_table(0, 8, "25 GB/s"), ValueError, "params must be"),
        (lambda: counts.host_table(PSI, 0), ValueError, "gpus must be"),
        (lambda: counts.host_table(PSI, 2048), ValueError, "gpus must be"),
        (lambda: counts.host_table(0, 8), ValueError, "params must be"),
    ],
)
def test_the_host_table_refuses_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_the_gpu_table_rows_are_the_package_count_for_each_choice_of_the_offload_order():
    assert [stage_what for stage_what in counts.CHOICES.values()] == [
        (stage, what != "optimizer") for stage, what in offload.ORDER
    ]
    rows = counts.gpu_table(PSI, 8).splitlines()[2:]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows] == list(counts.CHOICES)
    for row, (stage, params_too) in zip(rows, counts.CHOICES.values(), strict=True):
        on, off = offload.offloaded(PSI, 8, stage, parameters=params_too)
        assert f"| {units.format_bytes(on.total)} | {units.format_bytes(off.total)} |" in row
