"""The explicit list of registered methods (no import-time discovery).

Importing this module imports each method's ``SPEC`` and config only: pydantic, no torch.
"""

from __future__ import annotations

from models.ars import SPEC as ars
from models.base import MethodSpec
from models.bnn_linf import SPEC as bnn_linf
from models.fair_icp import SPEC as fair_icp
from models.hpde_gnn import SPEC as hpde_gnn
from models.ibmd import SPEC as ibmd
from models.kernel_sgd import SPEC as kernel_sgd
from models.otter import SPEC as otter
from models.pag_cert import SPEC as pag_cert
from models.ppd_snr import SPEC as ppd_snr
from models.sbg import SPEC as sbg
from models.score_fusion import SPEC as score_fusion
from models.sdcib import SPEC as sdcib
from models.sdp import SPEC as sdp
from models.self_ref import SPEC as self_ref
from models.sleeping_rl import SPEC as sleeping_rl
from models.sta import SPEC as sta
from models.unhippo import SPEC as unhippo
from models.win_rate import SPEC as win_rate
from models.zo_natural import SPEC as zo_natural

# The order of the main job and of every listing.
METHODS: dict[str, MethodSpec] = {
    spec.slug: spec
    for spec in (
        bnn_linf,
        sleeping_rl,
        zo_natural,
        pag_cert,
        fair_icp,
        kernel_sgd,
        ppd_snr,
        unhippo,
        hpde_gnn,
        sdcib,
        ibmd,
        score_fusion,
        sdp,
        sbg,
        sta,
        otter,
        ars,
        win_rate,
        self_ref,
    )
}


class UnknownMethodError(KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


def get(slug: str) -> MethodSpec:
    """The spec for ``slug``, or an error naming it and listing the valid ones."""
    try:
        return METHODS[slug]
    except KeyError:
        raise UnknownMethodError(f"unknown method {slug!r}; choose from: {', '.join(METHODS)}") from None


def names() -> list[str]:
    return list(METHODS)
