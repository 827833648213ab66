"""The four Centaurus SSM blocks (paper Fig. 1, Table 3), each with ``forward`` beside ``step``.

Index names follow the paper: ``i`` input channel (H), ``j`` output channel (H'), ``n`` state,
``m`` sub-state, ``l``/``t`` time, ``b`` batch.

=================  ===============================  ======================  ==================
block              kernel (time domain)             modes (complex states)  training path
=================  ===============================  ======================  ==================
depthwise (S4D)    k_il = Σ_n Δ_in E_in Re(Ā_in^l)  (H, N)                  depthwise conv, mix
pointwise (S5)     k_nl = Re(Ā_n^l)                 (N,)                    planned bottleneck
bottleneck         k_nl = Σ_m E_nm Re(Ā_nm^l)       (N, M)                  planned bottleneck
full               k_jil = Σ_n Δ_in E_jin Re(Ā^l)   (H', H, N)              full conv
=================  ===============================  ======================  ==================

Streaming (``step``) carries each group of M complex modes as one real tensor ``[Re x | Im x]``
(last axis 2M) and advances a chunk of ``T`` samples at once with the Centaurus decomposition:

    y[t]   = Σ_modes w · Re(Ā^{t+1} x)  +  (k * u_chunk)[t]          (carried state + in-chunk conv)
    x_new  = Ā^T x + Σ_s Ā^{T-1-s} u'[s]                              (post-update state, eq. 8)

where ``u'`` is the input that drives the mode (``u`` itself, or ``B̄ u``) and ``w`` its readout
weight. Both are linear in ``[x | u'_chunk]``, so one real matrix per mode group,
``W = [[readout, transition], [Toeplitz^T, input]]`` of shape ``(2M + T, T + 2M)``, does the whole
chunk in a single product: ``[y | x_new] = [x | u'] @ W`` (one grouped 1x1 Conv over all groups
when exported).

That costs ``O(T)`` per sample, so a long chunk is cut into ``P`` sub-chunks of ``S`` samples and
advanced in three products (the chunked scan): every sub-chunk's local convolution and end state
from zero, ``U (P, S) @ [input | Toeplitz^T]``; the states entering every sub-chunk, a block
lower-triangular matrix ``G`` of powers ``Ā^{kS}`` applied to ``[x | Z_0 .. Z_{P-1}]``; and their
readout, ``X_p @ readout``. :meth:`SSMLayer.sub_chunk` picks ``S`` from a cost model; chunks longer
than ``max_step_chunk`` samples are split into pieces so that the constants stay small.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .discretize import DiagonalModes, auditory_modes, dt_grid, powers, s4d_imag
from .fftconv import PLANS, UNFUSED, Plan, bottleneck_conv, causal_conv, cheapest_plan, measured_plan, plan_bottleneck
from .kernels import modal_kernel
from .precision import float32_island
from .stream import Counts, State, Streamable, causal_toeplitz


def _kaiming(rows: int, cols: int) -> nn.Parameter:
    w = torch.empty(rows, cols)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # the nn.Linear default, fan_in = cols
    return nn.Parameter(w)


def _hi(x: Tensor) -> Tensor:
    """Float64 where the device has it: step constants are built in high precision, then cast."""
    return x if x.device.type == "mps" else x.to(torch.float64)


class SSMLayer(Streamable):
    """Common machinery of the SSM blocks: chunked streaming and step constants.

    Subclasses define ``forward``, ``impulse_response``, ``state_shapes``, ``counts``,
    ``step_constants(T)`` and ``advance(u, state, consts)``.
    """

    kind: str = ""
    max_step_chunk: int = 4096
    max_sub_chunks: int = 64
    # cost model of the chunked scan, in multiply-adds (fitted to onnxruntime on a CPU): each of its
    # per-group products costs about this much extra per mode group, and its extra nodes this much
    batch_overhead: int = 750
    scan_overhead: int = 40_000
    # a multiply-add of the state product (one vector times a matrix per group: every weight read once)
    # costs this many of the sub-chunk products' (P rows per weight). Measured on the kws35 front (40 groups,
    # 1,280 samples): S = 80 / 40 / 20 took 446 / 377 / 428 µs per graph call, i.e. ~4.3x per multiply-add.
    vecmat_cost: float = 4.0
    h_in: int
    h_out: int

    def step(self, u: Tensor, state: State) -> tuple[Tensor, State]:
        """Advance by ``u (B, H, T)``, any ``T``; returns ``(B, H', T)`` and the new state."""
        outs = []
        frozen: dict[int, dict[str, Tensor]] | None = getattr(self, "frozen_constants", None)
        cache: dict[int, dict[str, Tensor]] = {}  # pieces share their length but for the last
        length = int(u.shape[-1])
        for pos in range(0, length, self.max_step_chunk):
            piece = u if length <= self.max_step_chunk else u[..., pos : pos + self.max_step_chunk]
            size = int(piece.shape[-1])  # a plain int even while tracing: shapes are static
            if size not in cache:
                if frozen is not None and size in frozen:
                    cache[size] = frozen[size]
                else:
                    cache[size] = {k: v.to(u.dtype) for k, v in self.step_constants(size).items()}
                    if frozen is not None:  # freezing: keep plain float32 constants for export
                        frozen[size] = {k: v.detach().clone() for k, v in cache[size].items()}
            y, state = self.advance(piece, state, cache[size])
            outs.append(y)
        if not outs:
            return u.new_zeros(u.shape[0], self.h_out, 0), state
        return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)), state

    def step_constants(self, length: int) -> dict[str, Tensor]:
        raise NotImplementedError

    def advance(self, u: Tensor, state: State, consts: dict[str, Tensor]) -> tuple[Tensor, State]:
        """One piece ``u (B, H, T)`` with the constants for its length."""
        raise NotImplementedError

    def impulse_response(self, length: int) -> Tensor:
        """The block's full MIMO kernel ``(H', H, length)``: ``y_j = Σ_i k_ji * u_i``."""
        raise NotImplementedError

    def sub_chunk(self, length: int) -> int:
        """Sub-chunk size ``S`` for a piece of ``length`` samples; ``length`` itself means one chunk matrix.

        ``S`` divides ``length`` into at most ``max_sub_chunks`` parts and minimises the multiply-adds
        per mode group, ``T S + T 4M + c (2M (P + 1))^2`` (``c = vecmat_cost``) against ``(T + 2M)^2`` for a
        single matrix, plus the overheads of the extra products. Long chunks of the first, high-rate layers of
        a network gain most (4-5x fewer multiply-adds at 1024 samples).
        """
        ((_, shape),) = self.state_shapes()
        groups, m2 = math.prod(shape[:-1]), shape[-1]
        best, best_cost = length, groups * (length + m2) ** 2
        for s in range(1, length):
            p = length // s
            if length % s or p > self.max_sub_chunks or p < 2:
                continue
            cost = groups * (length * (s + 2 * m2) + self.vecmat_cost * ((p + 1) * m2) ** 2 + 2 * self.batch_overhead)
            cost += self.scan_overhead
            if cost < best_cost:
                best, best_cost = s, cost
        return best

    def _modal_constants(self, wr: Tensor, wi: Tensor, weight: Tensor, length: int) -> dict[str, Tensor]:
        """Step constants for modes ``(*lead, M)`` and chunks of ``T = length`` samples.

        One sub-chunk: ``W (*lead, 2M + T, T + 2M)``, rows ``[Re x | Im x | u']``, columns
        ``[y | Re x_new | Im x_new]``: ``y[t] = Σ_m w_m (Re(Ā^{t+1}) Re x - Im(Ā^{t+1}) Im x) + Σ_s k[t - s] u'[s]``
        and ``x_new = Ā^T x + Σ_s Ā^{T-1-s} u'[s]``.

        ``P`` sub-chunks of ``S`` samples: ``Wu (*lead, S, 2M + S)`` (``[input | Toeplitz^T]``: a
        sub-chunk's end state and output from a zero state), ``G (*lead, (P + 1) 2M, (P + 1) 2M)``
        (``[x | Z_0 .. Z_{P-1}] -> [X_0 .. X_P]``, the states entering each sub-chunk and the final
        one, ``X_p = Ā^{pS} x + Σ_{q<p} Ā^{(p-1-q)S} Z_q``) and ``R (*lead, 2M, S)`` (the readout).
        """
        s = self.sub_chunk(length)
        t = torch.arange(s + 1, device=wr.device)
        pr, pi = powers(wr, wi, t)  # Ā^0 .. Ā^S: (*lead, M, S + 1)
        w = weight.expand(wr.shape).unsqueeze(-1)
        out = torch.cat([w * pr[..., 1:], -w * pi[..., 1:]], dim=-2)  # (*lead, 2M, S)
        toeplitz = causal_toeplitz(modal_kernel(wr, wi, weight, s))  # [t, s]: (*lead, S, S)
        inputs = torch.cat([pr[..., :-1].flip(-1), pi[..., :-1].flip(-1)], dim=-2).transpose(-1, -2)  # (*lead, S, 2M)
        if s == length:
            transition = _complex_matrix(pr[..., -1], pi[..., -1])  # Ā^T: (*lead, 2M, 2M)
            top = torch.cat([out, transition], dim=-1)
            bottom = torch.cat([toeplitz.transpose(-1, -2), inputs], dim=-1)
            return {"W": torch.cat([top, bottom], dim=-2)}
        p = length // s
        qr, qi = powers(wr, wi, s * torch.arange(p + 1, device=wr.device))  # Ā^{kS}: (*lead, M, P + 1)
        k = torch.arange(p + 1, device=wr.device)
        lag = k[None, :] - k[:, None]  # [q, p] = p - q
        keep = (lag >= 0).to(qr.dtype)
        blocks = _complex_matrix(  # (*lead, Q, P', 2M, 2M): block [q, p] = Ā^{(p-q)S} for q <= p
            (qr[..., lag.clamp_min(0)] * keep).movedim(-3, -1), (qi[..., lag.clamp_min(0)] * keep).movedim(-3, -1)
        )
        g = blocks.transpose(-3, -2).reshape(*wr.shape[:-1], (p + 1) * 2 * wr.shape[-1], (p + 1) * 2 * wr.shape[-1])
        return {"Wu": torch.cat([inputs, toeplitz.transpose(-1, -2)], dim=-1), "G": g, "R": out}

    def _dense_constants(self, phi: Tensor, gamma: Tensor, psi: Tensor, d: Tensor, length: int) -> dict[str, Tensor]:
        """Step constants of a real state space with a dense transition, per group, in the same layout as
        :meth:`_modal_constants` (so :meth:`_scan` advances it unchanged).

        Row-vector convention with the readout *before* the update (a strictly proper part plus ``d``):
        ``x[t] = x[t-1] Φ + u[t] γ``, ``y[t] = x[t-1] ψ + d u[t]``; the kernel is ``k[0] = d``,
        ``k[l] = γ Φ^{l-1} ψ``. Shapes: ``phi (*G, K, K)``, ``gamma, psi (*G, K)``, ``d (*G,)``.
        """
        s = self.sub_chunk(length)
        rows = _orbit(phi, gamma, s + 1)  # γ Φ^t: (*G, S + 1, K)
        cols = _orbit(phi.transpose(-1, -2), psi, s + 1)  # (Φ^t ψ)^T: (*G, S + 1, K)
        kernel = torch.cat([d.unsqueeze(-1), (rows[..., : s - 1, :] * psi.unsqueeze(-2)).sum(-1)], dim=-1)
        toeplitz_t = causal_toeplitz(kernel).transpose(-1, -2)  # [s, t] = k[t - s]: (*G, S, S)
        out = cols[..., :s, :].transpose(-1, -2)  # x -> y[t] = x Φ^t ψ: (*G, K, S)
        inputs = rows[..., :s, :].flip(-2)  # u[s] -> x_new: γ Φ^{S-1-s}: (*G, S, K)
        if s == length:
            top = torch.cat([out, torch.linalg.matrix_power(phi, s)], dim=-1)
            return {"W": torch.cat([top, torch.cat([toeplitz_t, inputs], dim=-1)], dim=-2)}
        p, k = length // s, int(phi.shape[-1])
        step = torch.linalg.matrix_power(phi, s)
        pw = [torch.eye(k, dtype=phi.dtype, device=phi.device).expand_as(phi)]
        for _ in range(p):
            pw.append(pw[-1] @ step)  # Φ^{jS}, j = 0..P
        zero = torch.zeros_like(phi)
        g = torch.cat(  # block [q, p] = Φ^{(p - q) S} for q <= p: [x | Z_0 .. Z_{P-1}] -> [X_0 .. X_P]
            [torch.cat([pw[c - r] if c >= r else zero for c in range(p + 1)], dim=-1) for r in range(p + 1)], dim=-2
        )
        return {"Wu": torch.cat([inputs, toeplitz_t], dim=-1), "G": g, "R": out}

    @staticmethod
    def _scan(
        x: Tensor, u: Tensor, c: dict[str, Tensor], u_lead: tuple[int, ...] | None = None
    ) -> tuple[Tensor, Tensor]:
        """Advance modes ``x (B, *lead, 2M)`` driven by ``u``, with the constants of :meth:`_modal_constants`.

        ``u`` is ``(B, *lead, T)``, or any tensor of ``T``-sample rows that reshapes to ``(*u_lead, T)``
        with ``u_lead`` broadcastable to ``(B, *lead)`` (an input shared by several mode groups).
        Returns the per-group outputs ``(B, *lead, T)`` and the new state.
        """
        t, m2 = int(u.shape[-1]), int(x.shape[-1])
        lead = tuple(int(d) for d in x.shape[:-1])
        u_lead = lead if u_lead is None else u_lead
        if "W" in c:
            w = c["W"]
            if u_lead == lead:
                u = u if tuple(u.shape) == (*lead, t) else u.reshape(*lead, t)
                r = _grouped_vecmat(torch.cat([x, u], dim=-1), w, (*lead, t + m2))
            else:  # an input shared by several groups: split W instead of repeating u
                r = (x.unsqueeze(-2) @ w[..., :m2, :] + u.reshape(*u_lead, 1, t) @ w[..., m2:, :]).squeeze(-2)
            return r[..., :t], r[..., t:]
        s = int(c["R"].shape[-1])
        p = t // s
        zy = u.reshape(*u_lead, p, s) @ c["Wu"]  # (B, *lead, P, 2M + S): from zero states
        z = torch.cat([x.unsqueeze(-2), zy[..., :m2]], dim=-2)  # (B, *lead, P + 1, 2M)
        xs = _grouped_vecmat(z, c["G"], (*lead, p + 1, m2))  # the state entering each sub-chunk, and the last one
        y = xs[..., :p, :] @ c["R"] + zy[..., m2:]
        return y.reshape(*lead, t), xs[..., p, :]


SUM_K = 4  # _grouped_vecmat: rows this short are a Mul and a ReduceSum, longer ones a grouped Conv


def _grouped_vecmat(z: Tensor, w: Tensor, shape: tuple[int, ...]) -> Tensor:
    """One vector-matrix product per group: ``z (B, *G, K) @ w (*G, K, C)``, reshaped to ``shape``.

    ``z`` may come in any shape holding ``(B, *G, K)`` in that order. Computed as one grouped 1x1
    convolution (a single Conv node when exported): far cheaper than a batched MatMul of many
    one-row products. For rows of at most ``SUM_K`` entries (one complex mode and one input per group,
    the pointwise blocks' single-frame step) a broadcast product summed over ``K`` is cheaper still:
    ONNX Runtime (one thread) took 5 / 11 / 25 µs for 64 / 128 / 256 groups of 3 against the Conv's 12 / 27 / 34.
    """
    k, c = int(w.shape[-2]), int(w.shape[-1])
    groups = math.prod(int(d) for d in w.shape[:-2])
    wt = w.reshape(groups, k, c).transpose(1, 2)  # (G, C, K): a constant when exported
    if k <= SUM_K:
        return (z.reshape(int(z.shape[0]), groups, 1, k) * wt).sum(-1).reshape(shape)
    return F.conv1d(z.reshape(int(z.shape[0]), groups * k, 1), wt.reshape(groups * c, k, 1), groups=groups).reshape(
        shape
    )


def _orbit(phi: Tensor, v: Tensor, count: int) -> Tensor:
    """``v Φ^t`` for ``t < count`` by doubling: ``v (*G, K)``, ``phi (*G, K, K)`` -> ``(*G, count, K)``."""
    out, power = v.unsqueeze(-2), phi
    while int(out.shape[-2]) < count:
        out = torch.cat([out, out @ power], dim=-2)
        power = power @ power
    return out[..., :count, :]


def _complex_matrix(re: Tensor, im: Tensor) -> Tensor:
    """``[[diag re, diag im], [-diag im, diag re]]``: ``[Re z | Im z] @ it = [Re cz | Im cz]`` for ``c = re + i im``."""
    ar, ai = torch.diag_embed(re), torch.diag_embed(im)
    return torch.cat([torch.cat([ar, ai], -1), torch.cat([-ai, ar], -1)], -2)


class ChannelKernelSSM(SSMLayer):
    """Shared code of the blocks with one kernel per channel (depthwise S4D, RTF): ``kernel(L) (H, L)``,
    then an optional pointwise ``H -> H'`` mixer."""

    mixer: nn.Parameter | None

    def _set_mixer(self, h_in: int, h_out: int, mixer: bool) -> None:
        if not mixer and h_out != h_in:
            raise ValueError(f"a {self.kind} block without mixer keeps its channel count (h_out == h_in)")
        self.mixer = _kaiming(h_out, h_in) if mixer else None

    def kernel(self, length: int) -> Tensor:
        """Per-channel kernels ``(H, length)``."""
        raise NotImplementedError

    def _mix(self, y: Tensor) -> Tensor:
        return y if self.mixer is None else self.mixer @ y

    def impulse_response(self, length: int) -> Tensor:
        k = self.kernel(length)
        if self.mixer is None:
            return torch.diag_embed(k.T).permute(1, 2, 0)
        return self.mixer[:, :, None] * k[None]

    def _mixer_counts(self) -> tuple[int, int]:
        """Parameters and FLOPs per sample of the mixer."""
        return (self.h_in * self.h_out, 2 * self.h_in * self.h_out) if self.mixer is not None else (0, 0)


class DepthwiseSSM(ChannelKernelSSM):
    """Depthwise-separable SSM (S4D-like): one N-mode kernel per channel, then a pointwise mixer.

    ``y_jf = M_ji (û_if Δ_in E_in K̂_inf)``. Δ is initialised over the channel axis ``i`` and
    ``A_in = -1/2 + iπn`` over the state axis (paper App. E).

    Args:
        h_in: input channels H.
        h_out: output channels H' (default H).
        n_states: states per channel N.
        mixer: add the H -> H' pointwise mixer (required when ``h_out != h_in``).
    """

    kind = "depthwise"

    def __init__(
        self,
        h_in: int,
        h_out: int | None = None,
        n_states: int = 4,
        *,
        mixer: bool = True,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
    ) -> None:
        super().__init__()
        h_out = h_in if h_out is None else h_out
        self.h_in, self.h_out, self.n_states = h_in, h_out, n_states
        dt = dt_grid(h_in, dt_min, dt_max)[:, None].expand(h_in, n_states)
        self.modes = DiagonalModes(s4d_imag(n_states).expand(h_in, n_states), dt)
        self.E = nn.Parameter(torch.randn(h_in, n_states) / math.sqrt(n_states))
        self._set_mixer(h_in, h_out, mixer)

    def _weights(self) -> tuple[Tensor, Tensor, Tensor]:
        wr, wi = self.modes.dtA()
        return wr, wi, self.modes.delta() * self.E  # Δ folded into the readout: unit input gain

    def kernel(self, length: int) -> Tensor:
        """Per-channel kernels ``(H, length)``."""
        return modal_kernel(*self._weights(), length)

    @float32_island
    def forward(self, u: Tensor) -> Tensor:
        """``(B, H, L) -> (B, H', L)``."""
        k = self.kernel(self.modes.live_length(u.shape[-1]))
        return self._mix(causal_conv(u, k, "depthwise"))

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("x", (self.h_in, 2 * self.n_states))]

    def step_constants(self, length: int) -> dict[str, Tensor]:
        return self._modal_constants(*map(_hi, self._weights()), length)

    def advance(self, u: Tensor, state: State, c: dict[str, Tensor]) -> tuple[Tensor, State]:
        (x,) = state  # (B, H, 2N)
        y, x = self._scan(x, u, c)
        return self._mix(y), [x]

    def counts(self) -> Counts:
        h, n = self.h_in, self.n_states
        mix_p, mix_f = self._mixer_counts()
        return Counts(3 * h * n + mix_p, 9 * h * n + mix_f)  # Table 3: depthwise(-separable)


class FullSSM(SSMLayer):
    """Full SSM block: every (output, input) channel pair has its own N-mode kernel.

    ``y_jf = û_if Δ_in E_jin K̂_jinf``. Δ is initialised over the input-channel axis ``i`` and
    ``A_jin = -1/2 + iπn`` over ``n`` (paper App. E). Its streaming state is ``H' H N`` complex
    numbers, so it belongs where channels are few (the waveform end of a network).
    """

    kind = "full"

    def __init__(self, h_in: int, h_out: int, n_states: int = 4, *, dt_min: float = 1e-3, dt_max: float = 1e-1,
                 init: str = "s4d", rate: float = 16000.0) -> None:  # fmt: skip
        super().__init__()
        self.h_in, self.h_out, self.n_states = h_in, h_out, n_states
        shape = (h_out, h_in, n_states)
        dt = dt_grid(h_in, dt_min, dt_max)[:, None].expand(h_in, n_states)  # Δ_in
        scale = 1 / math.sqrt(h_in * n_states)
        if init == "s4d":
            self.modes = DiagonalModes(s4d_imag(n_states).expand(shape), dt)
            self.E = nn.Parameter(torch.randn(shape) * scale)
        elif init == "auditory":
            # output j listens to a band: its N modes are the j-th N of h_out N ERB-spaced resonances
            # (discretize.auditory_modes); ΔA = -β + iω, and E scaled so that each mode peaks near unit gain
            omega, beta = auditory_modes(h_out * n_states, rate)
            omega, beta = omega.reshape(h_out, 1, n_states), beta.reshape(h_out, 1, n_states)
            d = dt[None]  # (1, H, N)
            self.modes = DiagonalModes((omega / d).expand(shape), dt, real=(beta / d).expand(shape))
            self.E = nn.Parameter(torch.randn(shape) * scale * (2 * beta / d).float().expand(shape))
        else:
            raise ValueError(f"unknown full-block init {init!r}; choose 's4d' or 'auditory'")

    def _weights(self) -> tuple[Tensor, Tensor, Tensor]:
        wr, wi = self.modes.dtA()
        return wr, wi, self.modes.delta() * self.E

    def kernel(self, length: int) -> Tensor:
        """``(H', H, length)``."""
        return modal_kernel(*self._weights(), length)

    @float32_island
    def forward(self, u: Tensor) -> Tensor:
        return causal_conv(u, self.kernel(self.modes.live_length(u.shape[-1])), "full")

    def impulse_response(self, length: int) -> Tensor:
        return self.kernel(length)

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("x", (self.h_out, self.h_in, 2 * self.n_states))]

    def step_constants(self, length: int) -> dict[str, Tensor]:
        return self._modal_constants(*map(_hi, self._weights()), length)

    def advance(self, u: Tensor, state: State, c: dict[str, Tensor]) -> tuple[Tensor, State]:
        (x,) = state  # (B, J, I, 2N)
        b, j, i = (int(d) for d in x.shape[:3])
        y, x = self._scan(x, u, c, (b, 1, i))  # the input u_i is shared by every output j
        return (y.sum(2) if i > 1 else y.reshape(b, j, int(u.shape[-1]))), [x]

    def counts(self) -> Counts:
        h, j, n = self.h_in, self.h_out, self.n_states
        return Counts(3 * h * j * n, 9 * h * j * n)  # Table 3: full


class _ProjectedSSM(SSMLayer):
    """Shared code of the two bottleneck blocks: ``y = C E Re(x)``, ``x' = Ā x + B̄ u`` (eq. 8)."""

    def __init__(
        self, h_in: int, h_out: int, modes: DiagonalModes, sub_weights: Tensor | None, plan: str | Plan = "auto"
    ) -> None:
        super().__init__()
        self.h_in, self.h_out = h_in, h_out
        self.n_states, self.n_sub = modes.shape
        self.modes = modes
        self.E = None if sub_weights is None else nn.Parameter(sub_weights)
        self.B = _kaiming(self.n_states, h_in)
        self.C = _kaiming(h_out, self.n_states)
        self.plan = plan

    def _sub_weights(self) -> Tensor:
        return torch.ones(self.modes.shape, device=self.B.device) if self.E is None else self.E

    def b_bar(self) -> Tensor:
        """``B̄_ni = Δ_n B_ni`` (one Δ per state block)."""
        return self.modes.delta()[:, :1] * self.B

    def kernel(self, length: int) -> Tensor:
        """Per-state kernels ``(N, length)`` with the sub-states contracted away."""
        wr, wi = self.modes.dtA()
        return modal_kernel(wr, wi, self._sub_weights(), length)

    def choose_plan(self, batch: int, length: int, device: torch.device | None = None) -> Plan:
        """The contraction order ``forward`` uses for this input (see :mod:`.fftconv`): ``auto`` is the
        FLOP model with the FFTs counted on a CPU and the fastest order measured once per shape on a GPU;
        ``measure`` measures on any device; ``flops`` is the FLOP model anywhere; ``rule`` the paper's rule
        (App. B, Listing 1); or a plan's name.

        On a CPU the FLOP model and the measurement agree where the rule does not: with more states than
        inputs the rule projects in frequency (complex arithmetic, 4x the real FLOPs), which made kws_v8's
        training step 8% slower (``python -m edgessm.bench trainstep kws_v8 --seconds 3 --vs
        train.ssm_plan=rule``)."""
        if isinstance(self.plan, Plan):
            return self.plan
        device = device or self.B.device
        if self.plan == "measure" or (self.plan == "auto" and device.type == "cuda"):
            return measured_plan(batch, self.h_in, self.h_out, self.n_states, length,
                                 self.modes.live_length(length), device, backward=torch.is_grad_enabled())  # fmt: skip
        if self.plan == "rule":
            return plan_bottleneck(batch, self.h_in, self.h_out, self.n_states)
        if self.plan in ("auto", "flops"):
            return cheapest_plan(batch, self.h_in, self.h_out, self.n_states, length)
        for p in (*PLANS, UNFUSED):
            if p.name == self.plan:
                return p
        names = [p.name for p in (*PLANS, UNFUSED)]
        raise ValueError(f"unknown plan {self.plan!r}; use 'auto', 'measure', 'flops', 'rule' or one of {names}")

    @float32_island
    def forward(self, u: Tensor) -> Tensor:
        """``(B, H, L) -> (B, H', L)`` along the planned contraction order."""
        batch, _, length = u.shape
        k = self.kernel(self.modes.live_length(length))
        return bottleneck_conv(u, k, self.b_bar(), self.C, self.choose_plan(batch, length, u.device))

    def impulse_response(self, length: int) -> Tensor:
        return torch.einsum("jn,nl,ni->jil", self.C, self.kernel(length), self.b_bar())

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("x", (self.n_states, 2 * self.n_sub))]

    def step_constants(self, length: int) -> dict[str, Tensor]:
        wr, wi = self.modes.dtA()
        consts = self._modal_constants(_hi(wr), _hi(wi), _hi(self._sub_weights()), length)
        consts["b_bar"] = self.b_bar()
        consts["c"] = self.C
        return consts

    def advance(self, u: Tensor, state: State, c: dict[str, Tensor]) -> tuple[Tensor, State]:
        (x,) = state  # (B, N, 2M)
        y, x = self._scan(x, c["b_bar"] @ u, c)  # driven by u'_n = B̄_ni u_i
        return c["c"] @ y, [x]


def assign_plan(model: nn.Module, kind: type[nn.Module], plan: str, choices: list[str], setting: str) -> int:
    """Set ``plan`` on every ``kind`` module of ``model`` after checking it is one of ``choices`` (the error names
    the config ``setting``); returns how many modules there are."""
    if plan not in choices:
        raise ValueError(f"{setting} must be one of {', '.join(choices)}, got {plan!r}")
    found = [m for m in model.modules() if isinstance(m, kind)]
    for m in found:
        m.plan = plan
    return len(found)


def set_ssm_plan(model: nn.Module, plan: str) -> int:
    """Give every bottleneck block in ``model`` the contraction ``plan`` (``auto``, ``measure``, ``flops``,
    ``rule`` or a plan's name: :meth:`_ProjectedSSM.choose_plan`); returns how many blocks there are. The
    same numbers on every plan, to rounding."""
    names = ["auto", "measure", "flops", "rule", *sorted(p.name for p in (*PLANS, UNFUSED))]
    return assign_plan(model, _ProjectedSSM, plan, names, "train.ssm_plan")


class PointwiseBottleneckSSM(_ProjectedSSM):
    """Pointwise bottleneck (S5-like): project H -> N states, one mode per state, project N -> H'.

    States are initialised in groups of ``group`` (4): Δ over the groups, ``A = -1/2 + iπm``
    within each group (paper App. E).
    """

    kind = "pointwise"

    def __init__(
        self,
        h_in: int,
        h_out: int,
        n_states: int = 16,
        *,
        group: int = 4,
        plan: str | Plan = "auto",
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
    ) -> None:
        group = max(1, min(group, n_states))
        n_groups = -(-n_states // group)
        dt = dt_grid(n_groups, dt_min, dt_max).repeat_interleave(group)[:n_states, None]
        imag = s4d_imag(group).repeat(n_groups)[:n_states, None]
        super().__init__(h_in, h_out, DiagonalModes(imag, dt), None, plan)

    def counts(self) -> Counts:
        h, j, n = self.h_in, self.h_out, self.n_states
        return Counts(h * n + 2 * n + j * n, 2 * h * n + 7 * n + 2 * j * n)  # Table 3: pointwise bottleneck


class BottleneckSSM(_ProjectedSSM):
    """Bottleneck: N state blocks of M sub-states each, mixed by real weights E (eq. 7-8).

    Δ is initialised over the state blocks ``n`` and ``A_nm = -1/2 + iπm`` over sub-states.
    """

    kind = "bottleneck"

    def __init__(
        self,
        h_in: int,
        h_out: int,
        n_states: int = 16,
        n_sub: int = 4,
        *,
        plan: str | Plan = "auto",
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
    ) -> None:
        dt = dt_grid(n_states, dt_min, dt_max)[:, None]
        imag = s4d_imag(n_sub).expand(n_states, n_sub)
        super().__init__(h_in, h_out, DiagonalModes(imag, dt), torch.randn(n_states, n_sub) / math.sqrt(n_sub), plan)

    def counts(self) -> Counts:
        h, j, n, m = self.h_in, self.h_out, self.n_states, self.n_sub
        return Counts(h * n + 3 * n * m + j * n, 2 * h * n + 9 * n * m + 2 * j * n)  # Table 3: bottleneck
