"""SpectraLDS: the Hankel filters distilled into a decaying LDS, nested by budget (notes §3.2-3.3, §7.6).

Each filter ``φ_k`` (unit norm, lags ``< L``) is approximated on its window by a combination of real
decaying modes ``a^τ``, ``0 <= a <= 1 - 1/L``: the SpectraLDS representation (paper Alg. 2 and
§5.2: poles chosen by orthogonal matching pursuit over a candidate grid, coefficients by least
squares on the chosen poles). Three changes make it stream in float32 at every ES-SSM budget:

1. **Prefix nesting** (notes §7.6). Filters are fitted in order and poles are only ever added: filter
   ``k`` uses the first ``S_k`` poles (``S_1 <= S_2 <= ...``), so budget ``K`` streams with ``S_K``
   states per channel, the state is the same whatever the budget (a budget only decides how many
   states are read), and a smaller budget's state is a prefix of a larger one's.
2. **Orthonormal realisation.** In the modal basis (diagonal ``A``, one state per pole) the filters
   of small ``σ_k`` need huge cancelling coefficients: ``φ_k`` is nearly orthogonal to every
   decaying exponential (``∫ <μ(β), φ_k>² dβ = σ_k``), so the coefficients are at least of order
   ``σ_k^{-1/2}``; plain least squares gives ``|C|`` up to 1e9 at ``L = 1024, K̄ = 32`` and a float32
   stream off by 10x the filter. We use the orthonormal basis of the same span instead, the
   Takenaka-Malmquist (Kautz) functions, i.e. the modes Gram-Schmidt-orthonormalised in
   ``ℓ2[0, ∞)`` in selection order:

       V_j(q) = r_j / (1 - a_j q⁻¹) · Π_{i<j} (q⁻¹ - a_i) / (1 - a_i q⁻¹),    r_j = sqrt(1 - a_j²).

   Its state-space form is a cascade of first-order all-pass sections (``e_0 = u``)

       x_j[t] = a_j x_j[t-1] + r_j e_{j-1}[t],    e_j[t] = r_j x_j[t-1] - a_j e_{j-1}[t],

   a lower-triangular ``A`` with ``A Aᵀ + B Bᵀ = I`` (input-normal: unit-variance states for a
   unit white input, ``‖A‖ <= 1``), still prefix-nested. Filter ``k`` reads ``Σ_j C_jk x_j`` and
   ``‖C_k‖₂`` is the filter's energy over all lags: there is nothing to cancel. Per sample the
   cascade costs 4 multiply-adds per state.
3. **Minimum-energy coefficients.** Matching pursuit runs until the in-window relative error is
   ``ρ·tol``; then each filter takes the smallest-norm coefficients that still meet ``tol``
   (a ridge at the discrepancy level), which keeps the continuation beyond ``L`` (the LDS has no
   hard cut at ``L``) as small as the fit allows.

Measured (``python -m edgessm.bench.distill``, tol 1e-3): ``L = 4096, K̄ = 32`` needs 42 states
(``S_4 = 18``, ``S_16 = 28``) with ``max |C| = 210``, and a float32 per-sample recurrence stays
within 4e-5 of its float64 self for every filter; plain least squares on the same poles in the
modal basis needs ``|C| = 2e7`` and is off by 11% in float32 (by 130% at ``L = 1024``). The fit is
deterministic (fixed grid, float64) and cached on disk next to the Hankel basis.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .hankel import BASIS_VERSION, cache_path, hankel_basis, load_npz, save_npz_atomic

DISTILL_VERSION = 1
DEFAULT_TOL = 3e-4  # in-window relative ℓ2 error per filter


def candidate_poles(length: int, n_geo: int = 1500, n_lin: int = 500) -> np.ndarray:
    """The pole grid: ``1 - geomspace(1/L, 1)`` (dense near 1) and a linear grid, all in ``[0, 1 - 1/L]``."""
    a = np.concatenate([1.0 - np.geomspace(1.0 / length, 1.0, n_geo), np.linspace(0.0, 1.0 - 1.0 / length, n_lin)])
    return np.unique(np.clip(a, 0.0, 1.0 - 1.0 / length))


def realization(poles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cascade as ``x[t] = A x[t-1] + B u[t]``: ``A (S, S)`` lower-triangular, ``B (S,)``, ``A Aᵀ + B Bᵀ = I``.

    ``A_jj = a_j``, ``A_ji = r_j r_i Π_{i<l<j} (-a_l)`` for ``i < j``, ``B_j = r_j Π_{l<j} (-a_l)``.
    """
    a = np.asarray(poles, dtype=np.float64)
    r = np.sqrt(1.0 - a * a)
    s = len(a)
    mat = np.diag(a)
    b = np.empty(s)
    for j in range(s):
        prod = 1.0
        for i in range(j - 1, -1, -1):
            mat[j, i] = r[j] * r[i] * prod
            prod *= -a[i]
        b[j] = r[j] * prod
    return mat, b


def cascade_basis(poles: np.ndarray, length: int) -> np.ndarray:
    """``V (length, S)``: the orthonormal basis functions ``V_j[t]``, ``t < length`` (the state's impulse response)."""
    from scipy.signal import lfilter

    chain = np.zeros(length)
    if length:
        chain[0] = 1.0
    out = np.empty((length, len(poles)))
    for j, a in enumerate(np.asarray(poles, dtype=np.float64)):
        out[:, j] = np.sqrt(1.0 - a * a) * lfilter([1.0], [1.0, -a], chain)
        chain = lfilter([-a, 1.0], [1.0, -a], chain)  # through the all-pass section
    return out


@dataclass(frozen=True)
class LDSBank:
    """A distilled filter bank: ``filter_k[t] ≈ Σ_{j < S_k} C_jk V_j[t]`` (``≈ φ_k[t]`` for ``t < L``).

    Attributes:
        length: ``L``, the window the filters were fitted on.
        poles: ``(S,)`` the poles ``a_j`` in selection order.
        readout: ``(S, K̄)`` ``C`` in the orthonormal (cascade) coordinates, ``C_jk = 0`` for ``j >= S_k``.
        n_states: ``(K̄,)`` ``S_k``, nondecreasing: budget ``K`` streams with ``S_K`` states per channel.
        error: ``(K̄,)`` in-window relative ℓ2 error ``‖f_k - φ_k‖ / ‖φ_k‖``.
        tol: the error the fit aimed at.
    """

    length: int
    poles: np.ndarray
    readout: np.ndarray
    n_states: np.ndarray
    error: np.ndarray
    tol: float

    @property
    def k_max(self) -> int:
        return int(self.readout.shape[1])

    def states(self, budget: int) -> int:
        """States per channel at budget ``K`` (``1 <= K <= K̄``)."""
        if not 1 <= budget <= self.k_max:
            raise ValueError(f"budget must be in [1, {self.k_max}], got {budget}")
        return int(self.n_states[budget - 1])

    def realization(self, n_states: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(A, B)`` of the first ``n_states`` states (all by default)."""
        return realization(self.poles[: len(self.poles) if n_states is None else n_states])

    def basis(self, length: int, n_states: int | None = None) -> np.ndarray:
        """``(length, n_states)`` state impulse responses ``V_j[t] = (A^t B)_j``."""
        return cascade_basis(self.poles[: len(self.poles) if n_states is None else n_states], length)

    def kernels(self, length: int, budget: int | None = None) -> np.ndarray:
        """``(length, K)`` the distilled filters at lags ``< length`` (any length: they continue past ``L``)."""
        k = self.k_max if budget is None else budget
        s = self.states(k)
        return self.basis(length, s) @ self.readout[:s, :k]

    def energy(self) -> np.ndarray:
        """``(K̄,)`` ``‖C_k‖₂``: each filter's ℓ2 norm over all lags (the in-window target has norm 1)."""
        return np.linalg.norm(self.readout, axis=0)

    def tail_ratio(self) -> np.ndarray:
        """``(K̄,)`` ℓ2 norm of each filter beyond lag ``L`` relative to its norm inside the window."""
        inside = np.linalg.norm(self.kernels(self.length), axis=0)
        return np.sqrt(np.maximum(self.energy() ** 2 - inside**2, 0.0)) / inside


def _min_norm(v: np.ndarray, f: np.ndarray, tol: float) -> np.ndarray:
    """Smallest-norm ``c`` with ``‖v c - f‖ <= tol ‖f‖`` (ridge at the discrepancy level); plain LS if unreachable."""
    u, s, wt = np.linalg.svd(v, full_matrices=False)
    g = u.T @ f
    r0 = max(float(f @ f - g @ g), 0.0)
    target = (tol * np.linalg.norm(f)) ** 2

    def coef(lam: float) -> np.ndarray:
        return wt.T @ (s * g / (s * s + lam))

    def res(lam: float) -> float:
        return r0 + float(np.sum((lam * g / (s * s + lam)) ** 2))

    if res(0.0) >= target:
        return coef(0.0)
    lo, hi = np.log(max(s[-1] ** 2, 1e-300) * 1e-6), np.log(max(s[0] ** 2, 1e-300) * 1e6)
    if res(np.exp(lo)) >= target:
        return coef(0.0)
    for _ in range(80):  # res(λ) increases with λ: bisect on log λ
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if res(np.exp(mid)) < target else (lo, mid)
    return coef(float(np.exp(lo)))


def fit_lds(
    phi: np.ndarray, tol: float = DEFAULT_TOL, *, rho: float = 0.5, poles: np.ndarray | None = None,
    max_states: int = 256,
) -> LDSBank:  # fmt: skip
    """Distil the columns of ``phi (L, K)`` (in order) into a prefix-nested orthonormal LDS bank.

    Args:
        phi: the filters to fit, lags ``0..L-1``.
        tol: in-window relative ℓ2 error per filter.
        rho: matching pursuit runs to ``rho * tol``; the coefficients then relax to ``tol`` at minimum norm.
        poles: candidate poles (default :func:`candidate_poles`).
        max_states: stop adding poles here (the filters then miss ``tol``: see ``error``).
    """
    from scipy.signal import lfilter

    length, k_max = phi.shape
    cand = candidate_poles(length) if poles is None else np.asarray(poles, dtype=np.float64)
    t = np.arange(length, dtype=np.float64)[:, None]
    atoms = np.power(cand[None, :], t)  # a^t (0^0 = 1)
    atoms /= np.linalg.norm(atoms, axis=0)
    chain = np.zeros(length)
    chain[0] = 1.0
    v = np.zeros((length, 0))
    chosen: list[int] = []
    readout = np.zeros((max_states, k_max))
    n_states = np.zeros(k_max, dtype=np.int64)
    error = np.zeros(k_max)
    for k in range(k_max):
        f = phi[:, k]
        norm = np.linalg.norm(f)
        while True:
            r = f - v @ np.linalg.lstsq(v, f, rcond=None)[0] if chosen else f
            if np.linalg.norm(r) <= rho * tol * norm or len(chosen) >= max_states:
                break
            score = np.abs(atoms.T @ r)  # matching pursuit: the candidate most correlated with the residual
            score[chosen] = -1.0
            j = int(np.argmax(score))
            chosen.append(j)
            a = cand[j]
            v = np.hstack([v, (np.sqrt(1.0 - a * a) * lfilter([1.0], [1.0, -a], chain))[:, None]])
            chain = lfilter([-a, 1.0], [1.0, -a], chain)
        s = len(chosen)
        c = _min_norm(v, f, tol) if s else np.zeros(0)
        readout[:s, k] = c
        n_states[k] = s
        error[k] = np.linalg.norm(f - v @ c) / norm if s else 1.0
    if np.any(error > tol * 1.001):
        worst = int(np.argmax(error))
        warnings.warn(
            f"LDS distillation stopped at {max_states} states: "
            f"filter {worst + 1} fits to {error[worst]:.2g} > tol {tol:g}",
            stacklevel=2,
        )
    s = len(chosen)
    return LDSBank(length, cand[chosen], readout[:s].copy(), n_states, error, float(tol))


@functools.lru_cache(maxsize=16)
def _cached_bank(length: int, k_max: int, tol: float, rho: float, max_states: int, path: Path | None) -> LDSBank:
    if path is not None:
        data = load_npz(path)
        if data is not None and data["readout"].shape[1] == k_max:
            return LDSBank(length, data["poles"], data["readout"], data["n_states"], data["error"], tol)
    basis = hankel_basis(length, k_max)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reported through bank.error; warned below once per fit
        bank = fit_lds(basis.phi, tol, rho=rho, max_states=max_states)
    if np.any(bank.error > tol * 1.001):
        warnings.warn(f"distilled L={length}, K̄={k_max} misses tol {tol:g} (max {bank.error.max():.2g})", stacklevel=3)
    if path is not None:
        save_npz_atomic(path, poles=bank.poles, readout=bank.readout, n_states=bank.n_states, error=bank.error)
    return bank


def distill_hankel(
    length: int, k_max: int = 32, tol: float = DEFAULT_TOL, *, rho: float = 0.5, max_states: int = 256,
    cache: bool = True,
) -> LDSBank:  # fmt: skip
    """The distilled LDS bank of the Hankel basis ``(L, K̄)``, from the disk cache when there."""
    path = None
    if cache:
        key = f"{length}-{k_max}-{tol!r}-{rho!r}-{max_states}-b{BASIS_VERSION}-d{DISTILL_VERSION}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        path = cache_path(f"lds_L{length}_K{k_max}_tol{tol:g}_{digest}.npz")
    return _cached_bank(int(length), int(k_max), float(tol), float(rho), int(max_states), path)
