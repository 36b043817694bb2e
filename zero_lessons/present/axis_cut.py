"""A y axis that starts above 0, marked as cut: two short slashes across the axis at its foot and, where
asked, the cut said in words in the panel's lower right corner."""

from __future__ import annotations

#: Where the slashes stand, in axes coordinates: two, one above the other, at the foot of the y axis.
SLASHES = ((-0.008, 0.008), ((0.0, 0.04), (0.05, 0.09)))


def mark_cut(ax, words: str = "") -> None:
    """Mark `ax`'s y axis as cut (it starts above 0), with `words` saying where, if given."""
    xs, ys = SLASHES
    for y in ys:
        ax.plot(xs, y, transform=ax.transAxes, color="black", lw=1, clip_on=False)
    if words:
        ax.text(0.995, 0.04, words, transform=ax.transAxes, ha="right", fontsize=8)
