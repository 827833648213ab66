"""The Hankel spectral basis of spectral SSMs (ES-SSM eq. 4-5, SpectraLDS §4; notes §3.1, §7.5).

For a training length ``L`` the basis is the top of the spectrum of the ``L x L`` Hankel matrix

    Z_ij = 2 / ((i + j)^3 - (i + j)),  i, j = 1..L,   i.e.   Z = ∫_0^1 μ(β) μ(β)^T dβ,
    μ(β) = (β - 1) [1, β, β^2, ..., β^{L-1}]                                      (ES-SSM eq. 4)

with eigenpairs ``(σ_k, φ_k)`` sorted descending; a spectral layer convolves its input with the
filters ``φ_k`` and scales them by ``σ_k^{1/4}`` (eq. 5-6).

Computing it right. The spectrum decays geometrically (``σ_k/σ_1 ≈ 1e-13`` by ``k ≈ 22`` at
``L = 1024``), and a dense eigensolver on ``Z`` has absolute error ``ε‖Z‖``: eigenpairs below
``σ_1·1e-16`` come out as noise (and ``σ`` negative). We factor ``Z`` instead. Its entries are
polynomials of degree ``2L`` in ``β``, so Gauss-Legendre quadrature with ``L + 1`` nodes integrates
them exactly, ``Z = A A^T`` with ``A_iq = sqrt(w_q) (β_q - 1) β_q^{i-1}``, and the eigenpairs of
``Z`` are the squared singular values and the left singular vectors of ``A``. An SVD of ``A`` has
absolute error ``ε‖A‖ = ε sqrt(‖Z‖)`` on the singular values, so the eigenpairs are resolved down
to ``σ_k/σ_1 ≈ 1e-28`` (checked against 60-digit arithmetic: eigenvectors to 1e-10 there, to
machine precision above ``1e-20``). The top ``K̄`` singular triplets come from a randomised range
finder with power iterations on ``A`` (float64, fixed seed, ``A`` built block by block), which costs
``O(L² K̄)`` instead of the ``O(L³)`` of a dense solver: under 1 s at ``L = 1024``, about 5 s at 4096.

Signs are normalised (the entry of largest magnitude of every ``φ_k`` is positive), and results are
cached on disk under ``cache_dir()/hankel`` keyed by ``(L, K̄)`` and the method version.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgessm.atomic import atomic_path

BASIS_VERSION = 1  # bump when the computation or the sign convention changes (it is part of the cache key)
_BLOCK_BYTES = 64 << 20  # quadrature columns of A are built in blocks of at most this many bytes


def cache_path(name: str) -> Path:
    """``cache_dir()/hankel/name`` (``$EDGESSM_CACHE`` or ``~/.cache/edgessm``)."""
    from edgessm.data.corpora import cache_dir

    return cache_dir() / "hankel" / name


def save_npz_atomic(path: Path, **arrays: np.ndarray) -> None:
    """Write ``arrays`` to ``path`` as ``.npz`` through a temporary file and ``os.replace``."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def load_npz(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of ``path``, or ``None`` if it is missing or unreadable (then it is recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, KeyError):
        return None


def hankel_matrix(length: int) -> np.ndarray:
    """The dense ``Z`` (float64), ``Z_ij = 2 / ((i+j)^3 - (i+j))`` with 1-based ``i, j``: for tests and references."""
    s = np.arange(2, 2 * length + 1, dtype=np.float64)
    g = 2.0 / (s**3 - s)
    i = np.arange(length)
    return g[i[:, None] + i[None, :]]


@dataclass(frozen=True)
class HankelBasis:
    """Top ``K̄`` eigenpairs of ``Z`` for length ``L``: ``sigma (K̄,)`` descending, ``phi (L, K̄)`` unit columns."""

    sigma: np.ndarray
    phi: np.ndarray

    @property
    def length(self) -> int:
        return int(self.phi.shape[0])

    @property
    def k_max(self) -> int:
        return int(self.phi.shape[1])

    def scale(self) -> np.ndarray:
        """``σ_k^{1/4}`` (σ clamped at a tiny positive value first), the per-filter gain of eq. 5."""
        return np.maximum(self.sigma, 1e-300) ** 0.25


def _quadrature(length: int) -> tuple[np.ndarray, np.ndarray]:
    from scipy.special import roots_legendre

    x, w = roots_legendre(length + 1)  # exact for the degree-2L integrands of Z
    return 0.5 * (x + 1.0), 0.5 * w


class _Factor:
    """``A (L, Q)``, ``A_iq = sqrt(w_q) (β_q - 1) β_q^i``, applied block by block over the nodes ``q``."""

    def __init__(self, length: int) -> None:
        self.length = length
        beta, w = _quadrature(length)
        self.log_beta = np.log(beta)
        self.scale = np.sqrt(w) * (beta - 1.0)
        self.block = max(1, _BLOCK_BYTES // (8 * length))

    def blocks(self):
        i = np.arange(self.length, dtype=np.float64)[:, None]
        for q0 in range(0, len(self.scale), self.block):
            e = i * self.log_beta[None, q0 : q0 + self.block]
            e[e < -700.0] = -np.inf  # exact zeros instead of denormals (slow in BLAS)
            np.exp(e, out=e)
            yield slice(q0, q0 + e.shape[1]), e * self.scale[None, q0 : q0 + e.shape[1]]

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """``A @ x`` for ``x (Q, m)``."""
        out = np.zeros((self.length, x.shape[1]))
        for sl, a in self.blocks():
            out += a @ x[sl]
        return out

    def rmatmul(self, y: np.ndarray) -> np.ndarray:
        """``A^T @ y`` for ``y (L, m)``."""
        out = np.empty((len(self.scale), y.shape[1]))
        for sl, a in self.blocks():
            out[sl] = a.T @ y
        return out


def normalize_signs(phi: np.ndarray) -> np.ndarray:
    """Flip columns so that the entry of largest magnitude of each is positive (deterministic signs)."""
    idx = np.argmax(np.abs(phi), axis=0)
    signs = np.sign(phi[idx, np.arange(phi.shape[1])])
    return phi * np.where(signs == 0, 1.0, signs)


def compute_hankel_basis(length: int, k_max: int = 32, *, power_iters: int = 3, seed: int = 0) -> HankelBasis:
    """Top ``k_max`` eigenpairs of ``Z`` (no cache): randomised SVD of the quadrature factor ``A``."""
    if length < 2 or not 1 <= k_max <= length:
        raise ValueError(f"need length >= 2 and 1 <= k_max <= length, got length={length}, k_max={k_max}")
    a = _Factor(length)
    m = min(length, k_max + max(k_max, 16))  # oversampled subspace
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(a.matmul(rng.standard_normal((length + 1, m))))
    for _ in range(power_iters):  # the spectrum decays geometrically: a few iterations converge fully
        q, _ = np.linalg.qr(a.rmatmul(q))
        q, _ = np.linalg.qr(a.matmul(q))
    _, s, ub_t = np.linalg.svd(a.rmatmul(q), full_matrices=False)  # (Q^T A)^T = A^T Q = V_b S U_b^T
    u = q @ ub_t.T[:, :k_max]
    return HankelBasis(sigma=s[:k_max] ** 2, phi=normalize_signs(u))


@functools.lru_cache(maxsize=16)
def _cached_basis(length: int, k_max: int, path: Path | None) -> HankelBasis:
    if path is not None:
        data = load_npz(path)
        if data is not None and data["phi"].shape == (length, k_max):
            return HankelBasis(sigma=data["sigma"], phi=data["phi"])
    basis = compute_hankel_basis(length, k_max)
    if path is not None:
        save_npz_atomic(path, sigma=basis.sigma, phi=basis.phi, version=np.array(BASIS_VERSION))
    return basis


def hankel_basis(length: int, k_max: int = 32, *, cache: bool = True) -> HankelBasis:
    """The Hankel basis for length ``L`` with ``K̄ = k_max`` filters, from the disk cache when there.

    Returns float64 arrays (treat them as read-only: they are shared between callers).
    """
    path = cache_path(f"basis_L{length}_K{k_max}_v{BASIS_VERSION}.npz") if cache else None
    return _cached_basis(int(length), int(k_max), path)
