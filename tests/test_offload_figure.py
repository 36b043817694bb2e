"""The offload placement figure: its bytes are DeepSpeed's, as `planning.offload` and `planning.counts` count
them, and it draws every place and link it names."""

import re

import pytest

from zero_lessons.planning import counts, nvme_buffers, offload
from zero_lessons.present.offload_figure import placements, plot_placements
from zero_lessons.stages import Stage


def link_bytes(labels) -> tuple[int, int]:
    """The least and most bytes per shard element a link's labels add up to ("2 + 2 B", "2-4 B")."""
    least = most = 0
    for label in labels:
        amount = re.search(r"([\d +-]+) B$", label).group(1)
        if "-" in amount:
            low, high = map(int, amount.split("-"))
        else:
            low = high = sum(int(n) for n in amount.split("+"))
        least, most = least + low, most + high
    return least, most


def held(place) -> int:
    return sum(size for _, size in place if size is not None)


def test_each_choice_holds_and_sends_what_deepspeeds_code_does():
    zero2, zero3, params, nvme = placements(8)
    assert zero2.held["GPU"] == (
        ("whole 16-bit weights", 16),
        ("  (2 B × 8 shards: 2Ψ)", None),
    )  # 8 shards' worth
    assert params.held["GPU"] == nvme.held["GPU"] == (("no shard kept", 0), ("layers: up as they run", None))
    assert held(zero2.held["host"]) == sum(offload.DEEPSPEED_ZERO2_HOST.values()) == 18
    assert held(zero3.held["host"]) == sum(offload.DEEPSPEED_ZERO3_HOST.values()) == 18
    assert held(params.held["host"]) == 20 and held(nvme.held["NVMe drive"]) == 16
    assert link_bytes(zero2.links["GPU", "host"]) == (offload.DEEPSPEED_PCIE[Stage.ZERO2],) * 2 == (6, 6)
    assert link_bytes(zero3.links["GPU", "host"]) == (offload.DEEPSPEED_PCIE[Stage.ZERO3],) * 2 == (10, 10)
    assert link_bytes(params.links["GPU", "host"]) == counts.PARAMS_PCIE == (10, 12)
    assert link_bytes(nvme.links["GPU", "host"]) == counts.PARAMS_PCIE == (10, 12)
    assert held(nvme.held["host"]) == 2 + 2 + 16  # gradients, weights under max_in_cpu, staging buffers
    per_element = offload.link_bytes(10**9, 8, Stage.ZERO3, link="nvme") / (10**9 // 8)
    assert link_bytes(nvme.links["host", "NVMe drive"]) == (per_element, per_element) == (32, 32)
    written = nvme.links["host", "NVMe drive"][0]  # the gradients' write, the part that can hide
    assert written == f"fp32 grads written {offload.NVME_GRAD_BYTES} B" and link_bytes([written]) == (4, 4)
    assert ("  (default sub_group_size)", None) in nvme.held["host"]  # the buffers' size is the default's
    assert (zero2.totals, zero3.totals) == ({("GPU", "host"): "in all 6 B"}, {("GPU", "host"): "in all 10 B"})
    assert params.totals == {("GPU", "host"): "in all 10-12 B"}  # the weights up once or twice
    assert (
        nvme.totals[("host", "NVMe drive")] == "in all 32 B"
        and nvme.totals["GPU", "host"] == "in all 10-12 B"
    )
    staging = dict(nvme.held["host"])["pinned staging buffers"]
    assert staging == nvme_buffers.staging_bytes([10**6]) // 10**6 == 16  # one sub-group


def test_the_whole_weights_scale_with_the_gpus_and_bad_counts_are_refused():
    assert placements(4)[0].held["GPU"] == (("whole 16-bit weights", 8), ("  (2 B × 4 shards: 2Ψ)", None))
    with pytest.raises(ValueError, match="gpus"):
        placements(0)


def test_the_figure_draws_every_choice_place_and_link():
    fig = plot_placements(8)
    texts = [t.get_text() for t in fig.axes[0].texts]
    for placement in placements(8):
        assert placement.name in texts
        for place, rows in placement.held.items():
            assert place in texts and all(what in texts for what, _ in rows)
        assert all(label in texts for labels in placement.links.values() for label in labels)
        assert all(total in texts for total in placement.totals.values())
    assert texts.count("in all") == 5  # every box with more than one sized line (the hosts and the drive)
    assert offload.MAX_IN_CPU > 7_500_000_000 // 8  # the drawn NVMe row's weights stay on the host at 7.5 B
    assert "Ψ/8" in fig.texts[0].get_text()


def test_the_figure_can_draw_the_host_rows_or_the_drive_row_alone():
    host, drive = (plot_placements(8, which) for which in ("host", "nvme"))
    names = [p.name for p in placements(8)]
    for fig, drawn in ((host, names[:3]), (drive, names[3:])):
        texts = [t.get_text() for t in fig.axes[0].texts]
        assert [n for n in names if n in texts] == drawn
    assert "NVMe drive" not in [t.get_text() for t in host.axes[0].texts]
    assert "crosses PCIe per step" in host.texts[0].get_text()  # one link drawn: it is named
    assert "crosses each link per step" in drive.texts[0].get_text()
    with pytest.raises(ValueError, match="which must be one of"):
        plot_placements(8, "gpu")
