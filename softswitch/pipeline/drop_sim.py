"""The data-plane drop simulator (the keyless `drop_sim` table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline


def sim_drop(p: Pipeline) -> bool:
    """True if this hotagg packet is lost: r uniform in [0, 65535], dropped when r < rate."""
    rate = p.t_drop._default_rec[1][0]
    # Rate 0 draws nothing: the random stream only matters while loss is simulated.
    return rate > 0 and p.rng.getrandbits(16) < rate
