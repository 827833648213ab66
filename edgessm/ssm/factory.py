"""Every SSM block kind by name: one place that knows them all (``make_ssm``)."""

from __future__ import annotations

from .blocks import BottleneckSSM, DepthwiseSSM, FullSSM, PointwiseBottleneckSSM, SSMLayer
from .essm import ElasticSpectralSSM
from .hades import HadesSSM
from .rtf import RationalSSM

SSM_KINDS: dict[str, type[SSMLayer]] = {
    "depthwise": DepthwiseSSM,
    "pointwise": PointwiseBottleneckSSM,
    "bottleneck": BottleneckSSM,
    "full": FullSSM,
    "rtf": RationalSSM,
}


BLOCK_KINDS: tuple[str, ...] = (*SSM_KINDS, "essm", "hades")  # every kind make_ssm builds


def make_ssm(
    kind: str, h_in: int, h_out: int, n_states: int, n_sub: int = 4, **kwargs
) -> SSMLayer | ElasticSpectralSSM | HadesSSM:
    """Build an SSM block by name: ``depthwise``, ``pointwise`` (S5), ``bottleneck``, ``full``, ``rtf``
    (:class:`~.rtf.RationalSSM`, ``n_states`` its order), ``hades`` (:class:`~.hades.HadesSSM`, ``n_states`` the
    state size of each head; ``kwargs`` its heads, routing and losses) or ``essm``.

    ``essm`` is the elastic spectral SSM (:class:`~.essm.ElasticSpectralSSM`) with ``K̄ = n_states`` spectral
    channels; ``kwargs`` are its options (``length``, ``mode``, ``gate``, ``budget_dropout``, ...); ``n_sub``
    is ignored.
    """
    if kind == "essm":
        return ElasticSpectralSSM(h_in, h_out, k_max=n_states, **kwargs)
    if kind == "hades":
        return HadesSSM(h_in, h_out, n_states, **kwargs)
    if kind not in SSM_KINDS:
        raise ValueError(f"unknown SSM kind {kind!r}; choose one of {sorted(BLOCK_KINDS)}")
    if kind == "bottleneck":
        return BottleneckSSM(h_in, h_out, n_states, n_sub, **kwargs)
    return SSM_KINDS[kind](h_in, h_out, n_states, **kwargs)
