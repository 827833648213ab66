"""Elastic Spectral SSM (ES-SSM): Hankel spectral filters, an input-adaptive gate and a runtime budget.

The layer at budget ``K <= K̄`` (ES-SSM paper, eq. 7-8):

    ŷ(t)   = D u(t) + Σ_{k<=K} α_k(t) σ_k^{1/4} M_k (φ_k * u)(t)             (eq. 7)
    α(t)   = softmax(s̃_1..K(t)),  α_k(t) = 0 for k > K                       (eq. 8a)
    s̃_k(t) = s_k(t) √K / (‖s_1..K(t)‖₂ + 1e-6)                               (eq. 8b)
    s(t)   = W_2 GELU(W_1 u(t) + b_1) + b_2   (K̄ logits, pointwise in time)  (eq. 8c)

``φ_k, σ_k`` are the Hankel basis of :mod:`.hankel` (length ``L``, unit-norm filters, lags ``< L``),
``M_k`` a learned ``h_out x h_in`` mixing matrix per filter, ``D`` a learned skip matrix. In
training every forward samples a budget ``K_train`` (budget dropout, eq. 9-10, Alg. 2) and runs
exactly the computation used at inference with ``K = K_train``: the logits, filters and ``M_k``
of channels above ``K_train`` are never touched, so they get no gradient. At inference the
budget is ``layer.budget`` (or the ``budget`` argument of ``forward``).

The gate multiplies the filter outputs *after* the filters, so the recurrent state never depends on
the input's gating nor on the budget. The filters can be realised two ways (``layer.mode``):

* ``"fir"``: the exact Hankel filters, lags ``0..L-1``. Training convolves with one rFFT of ``u``
  and ``K`` filter products; streaming keeps the last ``L - 1`` inputs of every channel and computes
  a chunk with MatMuls on a banded Toeplitz constant (``~2 L K`` FLOPs per channel and sample).
* ``"lds"``: the filters distilled into a decaying LDS (:mod:`.distill`): within ``tol`` of ``φ_k``
  on lags ``< L``, continuing as a decaying tail beyond. Both ``forward`` (FFT convolution with the
  LDS impulse responses over the whole input) and ``step`` compute this same function, so
  streaming equals training exactly. The state is ``S_K`` numbers per channel (a smaller budget
  carries fewer states: a prefix of a larger budget's), advanced chunk-wise with the chunked scan of
  :mod:`.blocks`: local convolutions and end states of ``P`` sub-chunks in one MatMul, the states
  entering every sub-chunk in a second, their readout in a third.

Every step is MatMul/Mul/Add/Softmax on constants with static shapes (no FFT, no dynamic slicing),
so a layer exports to ONNX as it is, one graph per budget.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .distill import DEFAULT_TOL, LDSBank, distill_hankel
from .fftconv import fft_size, rfft
from .hankel import HankelBasis, hankel_basis
from .precision import float32_island
from .stream import Counts, State, Streamable

Mode = Literal["fir", "lds"]
GATE_EPS = 1e-6  # ε of eq. 8b
_CACHE_ENTRIES = 32


@dataclass(frozen=True)
class BudgetDropout:
    """The training-budget distribution of the official ES-SSM recipe (notes §6).

    With probability ``p_full`` the full budget ``K̄``; otherwise ``K`` log-uniform on ``[k_min, K̄]``,
    biased toward large budgets by ``v <- 1 - (1 - v)^(1/bias)``, then snapped (in log scale) to the
    nearest of ``snap`` (plus ``K̄``). Any callable ``(k_max, generator) -> int`` can replace it.
    """

    p_full: float = 0.125
    k_min: int = 2
    bias: float = 0.6
    snap: tuple[int, ...] | None = (2, 3, 4, 6, 8, 12, 16, 24, 32)

    def __call__(self, k_max: int, generator: torch.Generator | None = None) -> int:
        if k_max <= self.k_min or float(torch.rand((), generator=generator)) < self.p_full:
            return k_max
        v = 1.0 - (1.0 - float(torch.rand((), generator=generator))) ** (1.0 / self.bias)
        log_k = math.log(self.k_min) + v * (math.log(k_max) - math.log(self.k_min))
        if not self.snap:
            return int(min(k_max, max(self.k_min, round(math.exp(log_k)))))
        choices = sorted({c for c in self.snap if self.k_min <= c <= k_max} | {k_max})
        return min(choices, key=lambda c: abs(math.log(c) - log_k))


BudgetSampler = Callable[[int, torch.Generator | None], int]


class ElasticSpectralSSM(Streamable):
    """ES-SSM layer ``(B, H, T) -> (B, H', T)`` with a runtime budget and two streaming modes.

    Args:
        h_in: input channels H.
        h_out: output channels H' (default H).
        length: ``L``, the Hankel filters' length (the paper's training length).
        k_max: ``K̄``, the number of spectral channels (filters).
        budget: inference budget ``K`` (default ``K̄``); also settable as ``layer.budget = K``.
        mode: ``"fir"`` (exact Hankel filters), ``"lds"`` (distilled LDS) or ``"auto"`` (see :meth:`choose_mode`).
        budget_dropout: training-budget sampler: ``True`` for :class:`BudgetDropout` defaults, a
            :class:`BudgetDropout` (or a dict of its fields) or any ``(k_max, generator) -> int``,
            ``None``/``False`` to train at ``budget``.
            Each forward in training samples anew unless ``train_budget`` is set (see :func:`sample_train_budget`).
        gate: ``False`` replaces the input-adaptive gate by uniform weights ``α_k = 1/K`` over the active
            channels (the paper's "no gate" ablation; no gate parameters then).
        gate_hidden: width of the gate MLP (default ``max(1, H // 2)``).
        lds_tol: distillation tolerance of the ``lds`` mode (in-window relative ℓ2 error per filter).
        m_std: initial standard deviation of ``M_k`` (default ``1/sqrt(H)``).
    """

    kind = "essm"
    max_step_chunk: int = 256  # longer chunks are streamed in pieces of this size (constants stay small)
    k_block: int = 8  # filters convolved at once in forward (bounds the peak memory of the FFT products)
    generator: torch.Generator | None = None  # for budget dropout (default: torch's global generator)

    def __init__(
        self,
        h_in: int,
        h_out: int | None = None,
        length: int = 1024,
        k_max: int = 32,
        *,
        budget: int | None = None,
        mode: Mode | Literal["auto"] = "fir",
        budget_dropout: BudgetDropout | BudgetSampler | bool | dict | None = True,
        gate: bool = True,
        gate_hidden: int | None = None,
        lds_tol: float = DEFAULT_TOL,
        m_std: float | None = None,
    ) -> None:
        super().__init__()
        if length < 2 or not 1 <= k_max <= length:
            raise ValueError(f"need length >= 2 and 1 <= k_max <= length, got length={length}, k_max={k_max}")
        h_out = h_in if h_out is None else h_out
        self.h_in, self.h_out, self.length, self.k_max = h_in, h_out, length, k_max
        self.basis: HankelBasis = hankel_basis(length, k_max)
        self.use_gate = bool(gate)
        self.gate_in: nn.Linear | None = None
        self.gate_out: nn.Linear | None = None
        if self.use_gate:
            hidden = gate_hidden or max(1, h_in // 2)
            self.gate_in = nn.Linear(h_in, hidden)
            self.gate_out = nn.Linear(hidden, k_max)
            nn.init.constant_(self.gate_out.bias, -2.0)  # as the official code (uniform weights after eq. 8b)
        self.M = nn.Parameter(torch.randn(k_max, h_out, h_in) * (m_std if m_std is not None else h_in**-0.5))
        self.D = nn.Parameter(torch.empty(h_out, h_in))
        nn.init.kaiming_uniform_(self.D, a=math.sqrt(5))  # the nn.Linear default
        self.budget_dropout: BudgetSampler | None = budget_sampler(budget_dropout)
        self.lds_tol = lds_tol
        self._bank: LDSBank | None = None
        self._consts: OrderedDict[tuple, object] = OrderedDict()
        self._mode: Mode = "fir"
        self.budget = k_max if budget is None else budget
        self.state_budget: int | None = None  # LDS: carry the states of this budget (>= budget) to switch up exactly
        self.train_budget: int | None = None  # training budget set from outside (one per update): no sampling
        self.last_budget = self.budget  # the budget of the latest forward (sampled in training)
        self.mode = mode

    # ---- configuration -------------------------------------------------------------------------

    @property
    def budget(self) -> int:
        """The inference budget ``K``: spectral channels ``1..K`` are active."""
        return self._budget

    @budget.setter
    def budget(self, value: int) -> None:
        if not 1 <= int(value) <= self.k_max:
            raise ValueError(f"budget must be in [1, {self.k_max}], got {value}")
        self._budget = int(value)

    @property
    def mode(self) -> Mode:
        """How the filters are realised: ``"fir"`` (exact Hankel filters) or ``"lds"`` (distilled LDS)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value == "auto":
            value = self.choose_mode()
        if value not in ("fir", "lds"):
            raise ValueError(f"unknown mode {value!r}; use 'fir', 'lds' or 'auto'")
        if value == "lds":
            _ = self.bank  # distil (or load) now rather than inside a forward
        self._mode = value
        self._consts.clear()

    @property
    def bank(self) -> LDSBank:
        """The distilled LDS of this layer's Hankel basis (computed once, cached on disk)."""
        if self._bank is None:
            self._bank = distill_hankel(self.length, self.k_max, self.lds_tol)
        return self._bank

    def n_states(self, budget: int | None = None) -> int:
        """Streaming state per channel at ``budget``: ``L - 1`` inputs (``fir``) or ``S_K`` LDS states (``lds``)."""
        if self.mode == "fir":
            return self.length - 1
        return self.bank.states(self.budget if budget is None else budget)

    def filter_flops(self, mode: Mode, budget: int | None = None) -> float:
        """FLOPs per channel and sample of the ``K`` filters.

        ``2 L K`` for the FIR filters, ``8 S_K + 2 Σ_{k<=K} S_k`` for the LDS (cascade and readout).
        """
        k = self.budget if budget is None else budget
        if mode == "fir":
            return 2.0 * self.length * k
        s = self.bank.n_states
        return 8.0 * float(s[k - 1]) + 2.0 * float(s[:k].sum())

    def choose_mode(self, budget: int | None = None, max_error: float | None = None) -> Mode:
        """Per-layer choice by error and cost at ``budget``.

        ``"lds"`` when every active distilled filter is within ``max_error`` (default ``lds_tol``) of its
        Hankel filter and the LDS costs fewer FLOPs than the FIR filters, else ``"fir"``.
        """
        k = self.budget if budget is None else budget
        limit = self.lds_tol if max_error is None else max_error
        fits = float(self.bank.error[:k].max()) <= limit * 1.001
        return "lds" if fits and self.filter_flops("lds", k) < self.filter_flops("fir", k) else "fir"

    # ---- shared pieces ---------------------------------------------------------------------------

    def _cache(self, key: tuple, make: Callable[[], object]) -> object:
        if key in self._consts:
            self._consts.move_to_end(key)
            return self._consts[key]
        value = make()
        self._consts[key] = value
        while len(self._consts) > _CACHE_ENTRIES:
            self._consts.popitem(last=False)
        return value

    def _scale(self, k: int, like: Tensor) -> Tensor:
        """``σ_k^{1/4}`` for ``k <= K`` (eq. 5's normalisation), as a constant of ``like``'s dtype/device."""
        key = ("scale", like.dtype, like.device)
        full = self._cache(key, lambda: torch.as_tensor(self.basis.scale(), dtype=like.dtype, device=like.device))
        return full[:k]

    def _mix(self, k: int, like: Tensor) -> Tensor:
        """``σ_k^{1/4} M_k`` for ``k <= K`` as ``(K, H', H)``; without a gate the uniform ``1/K`` is folded in."""
        scale = self._scale(k, like)
        if not self.use_gate:
            scale = scale / k
        return self.M[:k] * scale[:, None, None]

    def gate_logits(self, u_tm: Tensor, k: int) -> Tensor:
        """Eq. 8c for the first ``k`` channels only: ``(B, T, H) -> (B, T, k)``."""
        if self.gate_in is None or self.gate_out is None:
            raise ValueError("this ES-SSM layer has no gate (gate=False: uniform weights over the active channels)")
        h = F.gelu(F.linear(u_tm, self.gate_in.weight, self.gate_in.bias), approximate="tanh")
        return F.linear(h, self.gate_out.weight[:k], self.gate_out.bias[:k])

    def _gate(self, u_tm: Tensor, k: int) -> Tensor:
        """Masked gate weights ``α_1..k`` (eq. 8a-8b), ``(B, T, H) -> (B, T, k)``, in float32 or better."""
        s = self.gate_logits(u_tm, k)
        if s.dtype in (torch.float16, torch.bfloat16):
            s = s.float()
        s = s * math.sqrt(k) / (torch.sqrt((s * s).sum(-1, keepdim=True)) + GATE_EPS)  # eq. 8b
        return torch.softmax(s, dim=-1)  # eq. 8a over the active channels

    def gate_weights(self, u: Tensor, budget: int | None = None) -> Tensor:
        """``α^{(K)}(t)`` for all ``K̄`` channels, ``(B, H, T) -> (B, K̄, T)``: exactly 0 above ``K``."""
        k = self.budget if budget is None else budget
        if not self.use_gate:
            a = u.new_full((u.shape[0], k, u.shape[-1]), 1.0 / k)
        else:
            a = self._gate(u.transpose(1, 2), k).transpose(1, 2)
        return F.pad(a, (0, 0, 0, self.k_max - k))

    def _forward_budget(self, budget: int | None) -> int:
        if budget is not None:
            k = int(budget)
        elif self.training and self.train_budget is not None:
            k = min(int(self.train_budget), self.k_max)
        elif self.training and self.budget_dropout is not None:
            k = int(self.budget_dropout(self.k_max, self.generator))  # budget dropout (Alg. 2)
        else:
            k = self.budget
        if not 1 <= k <= self.k_max:
            raise ValueError(f"budget must be in [1, {self.k_max}], got {k}")
        self.last_budget = k
        return k

    def kernels(self, length: int) -> np.ndarray:
        """The filters of the current mode at lags ``< length``, ``(K̄, n)`` float64, ``n = min(length, L)`` for FIR."""
        if self.mode == "fir":
            return self.basis.phi[: min(length, self.length)].T
        return self.bank.kernels(length).T

    # ---- training: FFT convolution ----------------------------------------------------------------

    def _kernel_fft(self, kn: int, n_fft: int, like: Tensor) -> Tensor:
        def make() -> Tensor:
            k = torch.as_tensor(self.kernels(kn), dtype=like.dtype)
            return torch.fft.rfft(k, n=n_fft).to(like.device)

        return self._cache(("kf", self.mode, kn, n_fft, like.dtype, like.device), make)

    @float32_island
    def forward(self, u: Tensor, budget: int | None = None) -> Tensor:
        """``(B, H, T) -> (B, H', T)`` at ``budget`` (default: sampled in training, ``self.budget`` in eval)."""
        k = self._forward_budget(budget)
        b, h, n = u.shape
        x = u
        alpha = self._gate(x.transpose(1, 2), k).transpose(1, 2).to(x.dtype) if self.use_gate else None  # (B, K, T)
        mix = self._mix(k, x).permute(1, 0, 2).reshape(self.h_out, k * h)
        y = self.D.to(x.dtype) @ x
        if n == 0:
            return y
        kn = n if self.mode == "lds" else min(n, self.length)
        n_fft = fft_size(n + kn - 1)
        uf = rfft(x, n_fft)  # one rFFT of u
        kf = self._kernel_fft(kn, n_fft, x)  # (K̄, F), fixed filters: computed once per size
        for k0 in range(0, k, self.k_block):
            k1 = min(k, k0 + self.k_block)
            # (φ_k * u)(t) for k0 <= k < k1: causal convolution (eq. 1), the first n samples of the linear one
            feats = torch.fft.irfft(uf[:, None] * kf[None, k0:k1, None], n=n_fft)[..., :n]  # (B, k, H, T)
            z = feats if alpha is None else feats * alpha[:, k0:k1, None, :]  # α_k(t) (φ_k * u)(t)
            y = y + mix[:, k0 * h : k1 * h] @ z.reshape(b, (k1 - k0) * h, n)  # Σ_k σ_k^{1/4} M_k (...)
        return y

    # ---- streaming -------------------------------------------------------------------------------

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        if self.mode == "fir":
            return [("window", (self.h_in, self.length - 1))]
        return [("x", (self.h_in, self.carried_states()))]

    def carried_states(self) -> int:
        """LDS states carried per channel: those of ``max(budget, state_budget)``."""
        return self.bank.states(max(self.budget, self.state_budget or 0))

    def resize_state(self, state: State, budget: int | None = None) -> State:
        """An LDS state for another budget: truncating is exact; padding starts the new states at zero."""
        if self.mode == "fir":
            return list(state)
        (x,) = state
        s = self.bank.states(self.budget if budget is None else budget)
        return [x[..., :s] if x.shape[-1] >= s else F.pad(x, (0, s - x.shape[-1]))]

    def step(self, u: Tensor, state: State) -> tuple[Tensor, State]:
        """Advance by ``u (B, H, T)``, any ``T``, at ``self.budget``; returns ``(B, H', T)`` and the new state."""
        y, state = self._advance(u, state)
        return y.transpose(1, 2), state

    def step_tm(self, u: Tensor, state: State) -> tuple[Tensor, State]:
        """:meth:`step` on time-major chunks ``(B, T, H) -> (B, T, H')``."""
        return self._advance(u.transpose(1, 2), state)

    def _advance(self, u: Tensor, state: State) -> tuple[Tensor, State]:
        """``u (B, H, T)`` -> time-major ``y (B, T, H')`` and the new state."""
        k = self.budget
        b, h, t = (int(d) for d in u.shape)
        (x,) = state
        if t == 0:
            return u.new_zeros(b, 0, self.h_out), [x]
        piece_step = self._fir_piece if self.mode == "fir" else self._lds_piece
        feats = []
        for pos in range(0, t, self.max_step_chunk):
            piece = u if t <= self.max_step_chunk else u[..., pos : pos + self.max_step_chunk]
            f, x = piece_step(piece, x, k)
            feats.append(f)
        f = feats[0] if len(feats) == 1 else torch.cat(feats, dim=2)  # (B, H, T, K): (φ_k * u)(t)
        u_tm = u.transpose(1, 2)
        z = f.permute(0, 2, 3, 1)  # (B, T, K, H)
        if self.use_gate:
            z = z * self._gate(u_tm, k).to(u.dtype).unsqueeze(-1)  # α_k(t)
        mix = self._mix(k, u).permute(0, 2, 1).reshape(k * h, self.h_out)
        y = z.reshape(b, t, k * h) @ mix + u_tm @ self.D.T
        return y, [x]

    # FIR: the window of the last L - 1 inputs; a chunk is cut into P sub-chunks of S samples whose
    # frames (L - 1 + S samples each, static slices) meet one banded Toeplitz constant.

    def _fir_sub_chunk(self, t: int, k: int) -> int:
        """The largest divisor ``S`` of ``t`` whose Toeplitz constant ``(L - 1 + S, S K)`` stays under 2M entries."""
        return max(s for s in range(1, t + 1) if t % s == 0 and (s == 1 or (self.length - 1 + s) * s * k <= 1 << 21))

    def _fir_constants(self, t: int, k: int, like: Tensor) -> tuple[int, Tensor]:
        def make() -> tuple[int, Tensor]:
            s = self._fir_sub_chunk(t, k)
            n = self.length - 1 + s
            lag = np.arange(s)[None, :] + (self.length - 1) - np.arange(n)[:, None]  # [j, t]: lag of input j at t
            valid = (lag >= 0) & (lag < self.length)
            w = self.basis.phi[np.clip(lag, 0, self.length - 1), :k] * valid[..., None]  # (n, s, K)
            return s, torch.as_tensor(w.reshape(n, s * k), dtype=like.dtype, device=like.device)

        return self._cache(("fir", t, k, like.dtype, like.device), make)

    def _fir_piece(self, u: Tensor, window: Tensor, k: int) -> tuple[Tensor, Tensor]:
        b, h, t = (int(d) for d in u.shape)
        s, w = self._fir_constants(t, k, u)
        xw = torch.cat([window, u], dim=-1)  # (B, H, L - 1 + T)
        span = self.length - 1 + s
        p = t // s
        frames = xw.unsqueeze(2) if p == 1 else torch.stack([xw[..., i * s : i * s + span] for i in range(p)], dim=2)
        f = (frames @ w).reshape(b, h, t, k)
        return f, xw[..., t:]

    # LDS: states x (B, H, S) of the cascade realisation. Sub-chunks of S_ samples: local outputs and
    # end states from zero, Z_p = U_p @ Wl; states entering each sub-chunk, [X_0..X_P] = [x, Z_0..] @ G
    # (X_p = A^S X_{p-1} + Z_{p-1}); readout X_p @ R (post-update, y[t] = C^T x[t]).

    def _lds_sub_chunk(self, t: int, n: int, k: int) -> int:
        best, best_cost = t, t * (t * k + n) + n * n + t * n * k
        for s in range(1, t):
            p = t // s
            if t % s or p > 32:
                continue
            cost = t * (s * k + n) + ((p + 1) * n) ** 2 + t * n * k + 20_000  # the last term: two more MatMuls
            if cost < best_cost:
                best, best_cost = s, cost
        return best

    def _lds_constants(self, t: int, n: int, k: int, like: Tensor) -> dict[str, object]:
        def make() -> dict[str, object]:
            s = self._lds_sub_chunk(t, n, k)
            p = t // s
            a, _ = self.bank.realization(n)
            c = self.bank.readout[:n, :k]  # (n, K), zero below each filter's S_k
            v = self.bank.basis(s, n)  # V[τ] = A^τ B
            kern = v @ c  # (s, K) in-chunk impulse responses
            lag = np.arange(s)[None, :] - np.arange(s)[:, None]  # [j, t] = t - j
            toeplitz = kern[np.clip(lag, 0, s - 1)] * (lag >= 0)[..., None]  # (s, s, K)
            inputs = v[::-1]  # [j] = A^{s-1-j} B: input j's share of the end state
            powers = [np.eye(n)]
            for _ in range(s):
                powers.append(a @ powers[-1])
            readout = np.stack([powers[i + 1].T @ c for i in range(s)], axis=1)  # (n, s, K): (A^{t+1})^T C
            out: dict[str, object] = {"s": s, "p": p}
            cast = lambda m: torch.as_tensor(np.ascontiguousarray(m), dtype=like.dtype, device=like.device)  # noqa: E731
            out["Wl"] = cast(np.concatenate([toeplitz.reshape(s, s * k), inputs], axis=1))
            out["R"] = cast(readout.reshape(n, s * k))
            a_s = powers[s]
            if p == 1:
                out["AsT"] = cast(a_s.T)
            else:
                jumps = [np.eye(n)]
                for _ in range(p):
                    jumps.append(a_s @ jumps[-1])
                g = np.zeros((p + 1, n, p + 1, n))
                for i in range(p + 1):  # input block i: x (i = 0) or Z_{i-1}
                    for q in range(i, p + 1):  # output block q: X_q
                        g[i, :, q, :] = jumps[q - i].T
                out["G"] = cast(g.reshape((p + 1) * n, (p + 1) * n))
            return out

        return self._cache(("lds", t, n, k, like.dtype, like.device), make)

    def _lds_piece(self, u: Tensor, x: Tensor, k: int) -> tuple[Tensor, Tensor]:
        b, h, t = (int(d) for d in u.shape)
        n = int(x.shape[-1])
        need = self.bank.states(k)
        if n < need:
            raise ValueError(
                f"the LDS state carries {n} states per channel but budget {k} reads {need}: "
                "set layer.state_budget (or resize_state) before raising the budget"
            )
        c = self._lds_constants(t, n, k, u)
        s, p = c["s"], c["p"]
        loc = u.reshape(b, h, p, s) @ c["Wl"]  # (B, H, P, s K + n): local outputs and end states
        y_loc, z = loc[..., : s * k], loc[..., s * k :]
        if p == 1:
            xs = x.unsqueeze(2)
            x = x @ c["AsT"] + z[..., 0, :]
        else:
            states = (torch.cat([x.unsqueeze(2), z], dim=2).reshape(b, h, (p + 1) * n) @ c["G"]).reshape(b, h, p + 1, n)
            xs, x = states[..., :p, :], states[..., p, :]
        f = (xs @ c["R"] + y_loc).reshape(b, h, t, k)
        return f, x

    def counts(self) -> Counts:
        """Parameters and FLOPs per sample of one streaming step at ``self.budget`` in the current mode.

        Gate (``2 H G + 2 G K``, tanh-GELU ≈ 8 per unit, RMS + softmax ≈ 8 per channel), filters per
        channel (``2 L K`` FIR; ``8 S + 2 Σ_{k<=K} S_k`` for the LDS cascade of ``S`` carried states,
        whose constants are ``2 S + Σ S_k`` numbers), gating and mixing ``K H + 2 K H H'``, skip ``2 H H'``.
        Without a gate the uniform weights are folded into ``M_k``: no gate and no gating terms.
        """
        k, h, j = self.budget, self.h_in, self.h_out
        params = k * h * j + h * j
        flops = 2.0 * k * h * j + 2.0 * h * j
        if self.gate_in is not None:
            g = self.gate_in.out_features
            params += h * g + g + g * k + k
            flops += 2.0 * h * g + 2.0 * g * k + 10.0 * g + 8.0 * k + k * h
        if self.mode == "fir":
            params += self.length * k
            flops += h * self.filter_flops("fir", k)
        else:
            carried = self.carried_states()
            read = int(self.bank.n_states[:k].sum())
            params += 2 * carried + read
            flops += h * (8.0 * carried + 2.0 * read)
        return Counts(params, flops)


def essm_layers(module: nn.Module) -> list[ElasticSpectralSSM]:
    return [m for m in module.modules() if isinstance(m, ElasticSpectralSSM)]


def set_budget(module: nn.Module, budget: int) -> None:
    """Set the inference budget of every ES-SSM layer of ``module`` (clamped to each layer's ``K̄``)."""
    for layer in essm_layers(module):
        layer.budget = min(budget, layer.k_max)


def sample_train_budget(
    module: nn.Module, sampler: BudgetSampler | None = None, generator: torch.Generator | None = None
) -> int | None:
    """Draw one training budget for the whole network (Alg. 2 samples one ``K_train`` per update).

    Every ES-SSM layer then trains at ``min(K_train, its K̄)`` until the next call; without this the
    layers sample independently at every forward. Returns the budget (``None`` if there are no layers).
    """
    layers = essm_layers(module)
    if not layers:
        return None
    k_max = max(layer.k_max for layer in layers)
    sampler = sampler or layers[0].budget_dropout or BudgetDropout()
    k = int(sampler(k_max, generator))
    for layer in layers:
        layer.train_budget = k
    return k


def set_mode(module: nn.Module, mode: Mode | Literal["auto"]) -> None:
    """Set the filter realisation of every ES-SSM layer of ``module`` (``"auto"`` decides per layer)."""
    for layer in essm_layers(module):
        layer.mode = mode


def budget_sampler(value: BudgetDropout | BudgetSampler | bool | dict | None) -> BudgetSampler | None:
    """The training-budget sampler of a config value: ``true`` (:class:`BudgetDropout` defaults), ``false``
    (none: train at the full budget, the "no budget dropout" ablation) or a table of :class:`BudgetDropout` fields."""
    if isinstance(value, dict):
        kw = dict(value)
        if isinstance(kw.get("snap"), list):
            kw["snap"] = tuple(kw["snap"])
        return BudgetDropout(**kw)
    if value is True:
        return BudgetDropout()
    return value or None


class ElasticBudget:
    """Mixin for whole networks: one budget for every ES-SSM layer (``net.budget = K`` or ``net.set_budget(K)``).

    ``k_max`` is the largest ``K̄`` of the layers (``None`` without ES-SSM layers); a layer with a smaller
    ``K̄`` runs at ``min(K, K̄)``. ``budget`` reads back the requested budget (the largest layer budget).
    """

    def essm_layers(self) -> list[ElasticSpectralSSM]:
        return essm_layers(self)  # type: ignore[arg-type]

    @property
    def k_max(self) -> int | None:
        layers = self.essm_layers()
        return max(layer.k_max for layer in layers) if layers else None

    @property
    def budget(self) -> int | None:
        layers = self.essm_layers()
        return max(layer.budget for layer in layers) if layers else None

    @budget.setter
    def budget(self, value: int) -> None:
        self.set_budget(value)

    def set_budget(self, budget: int) -> None:
        """Run every ES-SSM layer at ``budget`` (``1 <= budget <= k_max``) in eval and in streaming."""
        k_max = self.k_max
        if k_max is None:
            raise ValueError(f"budgets apply to ES-SSM models only; this {type(self).__name__} has no ES-SSM layers")
        if not 1 <= int(budget) <= k_max:
            raise ValueError(f"budget must be in [1, {k_max}] (the model's K̄), got {budget}")
        set_budget(self, int(budget))  # type: ignore[arg-type]
