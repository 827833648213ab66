"""HADES: a selective multi-head SSM as an adaptive filter bank ("Graph Signal Processing Meets Mamba2:
Adaptive Filter Bank via Delta Modulation", Shin et al.), as a streaming block.

``M = S + E`` heads, each a Mamba2-style selective SSM with a scalar decay per head (eq. 4, 6):

    Δ_t = softplus(Δ_base,t + b_Δ),   h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_tᵀ,   y_t = C_t h_t + D x_t

with ``x_t`` (``P`` per head), ``B_t``, ``C_t`` (``N``) and ``Δ_base,t`` projected from the input ``u_t``.
The ``S`` *shared* heads always run on the base Δ. The ``E`` *expert* heads see the spectral residual
``r_t = u_t - μ_t`` (``μ`` a causal running mean of the input): a router scores them,
``s_t = f_e([Δ_base,t ‖ r_t])`` (eq. 13), the top ``Q`` are selected, and every expert's Δ gets the spectral
bias ``γ f_b([Δ_base,t ‖ r_t])`` (eq. 14). The block's output is ``W_o`` of the heads' outputs, shared heads
at weight 1 and selected experts at ``Q`` times their renormalised router probabilities (the rest 0).

Design choices (the paper is written for token streams on a GPU, this block for endless audio on NPUs):

- **Dense routing.** Every expert's state advances every frame and selection only weighs outputs, so
  shapes stay static; top-Q is a rank count by pairwise score differences (``Sub``, ``Mul``, ``Clip``,
  ``ReduceSum``: no ``TopK`` node), computed from detached scores (the router learns through the
  softmax weights, as in mixture-of-experts gating).
- **The running mean** ``μ``: the paper's cumulative mean ``mean(u_1..u_t)`` stops moving in a stream that
  runs for hours (after an hour at 100 frames/s a new second moves it by 0.03%), so the default is an
  exponential mean over ``mean_frames`` (``mean="ema"``); ``mean="cumulative"`` is the paper's, with the
  sum and count in the state.
- **Chunked scan.** Training and streaming share one exact chunk computation (SSD-style: within a
  chunk of ``T`` frames a ``T x T`` decay-masked product, between chunks the ``N x P`` state per head), so
  ``forward`` is ``step`` over chunks of ``chunk`` frames from the zero state. Cumulative sums are
  products with a constant triangular matrix, softplus is written with ``Relu``/``Exp``/``Log``.
- **Losses** (Sec. 3.2): ``balance``, the squared coefficient of variation of the experts' mean router
  probabilities (eq. 15), and ``diversity``, ``E[(<ŷ_i, ŷ_j> - δ_ij)^2]`` over the ℓ2-normalised expert
  outputs (eq. 16), weighted by ``balance_weight``/``diversity_weight`` and collected by the trainer
  (:func:`auxiliary_loss`) after each training forward.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .precision import float32_island
from .stream import Counts, State, Streamable

_MASKED = 1e4  # exp(-_MASKED) = 0: the upper triangle of a decay matrix
_SHARP = 1e8  # clip(d * _SHARP, 0, 1): a step at d = 0 for any score difference float32 resolves (1e-7)


def _softplus(x: Tensor) -> Tensor:
    """``log(1 + e^x)``, stable, from ops every exporter and NPU compiler knows (no Softplus node)."""
    return F.relu(x) + torch.log(1 + torch.exp(-(F.relu(x) + F.relu(-x))))


class HadesSSM(Streamable):
    """``(B, H, L) -> (B, H', L)``: the HADES filter bank (module docstring).

    Args:
        h_in, h_out: channels in and out (``h_out`` default ``h_in``).
        n_states: state size ``N`` of every head (``B_t``, ``C_t``).
        shared, experts: shared heads ``S`` and expert heads ``E`` (either may be 0: the paper's ablations).
        top_q: experts selected per frame (``Q <= E``).
        head_dim: ``P``, channels of ``x_t`` per head.
        gamma: strength of the experts' spectral Δ bias.
        mean: ``"ema"`` (default) or ``"cumulative"`` running mean for the spectral residual.
        mean_frames: time constant of the exponential mean, in frames.
        dt_min, dt_max: range of the initial Δ (log-uniform over heads).
        chunk: frames per chunk of the parallel scan.
        balance_weight, diversity_weight: weights of the two training losses.
    """

    kind = "hades"

    def __init__(
        self,
        h_in: int,
        h_out: int | None = None,
        n_states: int = 16,
        *,
        shared: int = 4,
        experts: int = 8,
        top_q: int = 2,
        head_dim: int = 16,
        gamma: float = 0.1,
        mean: str = "ema",
        mean_frames: float = 100.0,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        chunk: int = 64,
        balance_weight: float = 0.01,
        diversity_weight: float = 0.01,
    ) -> None:
        super().__init__()
        h_out = h_in if h_out is None else h_out
        if shared < 0 or experts < 0 or shared + experts < 1:
            raise ValueError(f"a HADES block needs at least one head, got shared={shared}, experts={experts}")
        if experts and not 1 <= top_q <= experts:
            raise ValueError(f"top_q must be in [1, experts={experts}], got {top_q}")
        if mean not in ("ema", "cumulative"):
            raise ValueError(f"unknown running mean {mean!r}; choose 'ema' or 'cumulative'")
        if mean_frames < 1 or chunk < 1:
            raise ValueError("mean_frames and chunk must be at least 1")
        self.h_in, self.h_out, self.n_states = h_in, h_out, n_states
        self.shared, self.experts, self.top_q, self.head_dim = shared, experts, top_q if experts else 0, head_dim
        self.heads = shared + experts
        self.gamma, self.mean, self.chunk = gamma, mean, chunk
        self.decay = math.exp(-1.0 / mean_frames)
        self.balance_weight, self.diversity_weight = balance_weight, diversity_weight
        m, p, n = self.heads, head_dim, n_states
        self.in_proj = nn.Linear(h_in, m * p + 2 * n + m)  # x, B, C, Δ_base
        self.router = nn.Linear(m + h_in, 2 * experts) if experts else None  # scores f_e and Δ bias f_b
        self.out_proj = nn.Linear(m * p, h_out)
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, m)))  # A = -exp(A_log), Mamba2's range
        dt = torch.exp(torch.linspace(math.log(dt_min), math.log(dt_max), m))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.D = nn.Parameter(torch.ones(m))
        for q in (self.A_log, self.dt_bias, self.D):
            q._optim = {"weight_decay": 0.0}  # type: ignore[attr-defined]
        self.aux_losses: dict[str, Tensor] = {}

    # -- the streaming contract --------------------------------------------------------------------

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        means = [("mean", (self.h_in,))] if self.mean == "ema" else [("sum", (self.h_in,)), ("count", (1,))]
        return [*means, ("h", (self.heads, self.n_states, self.head_dim))]

    @float32_island
    def forward(self, u: Tensor) -> Tensor:
        """``(B, H, L) -> (B, H', L)`` from the zero state, chunk by chunk (exactly what :meth:`step` streams).
        The scan's decays and sums stay in float32 under autocast."""
        state = self.init_state(int(u.shape[0]), device=u.device, dtype=u.dtype)
        y, _, experts, probs = self._chunks(u, state)
        self.aux_losses = {}
        if self.training and self.experts and experts:
            self.aux_losses = {
                "balance": self.balance_weight * _balance(torch.cat(probs, 1)),
                "diversity": self.diversity_weight * _diversity(torch.cat(experts, 2)),
            }
        return y

    def step(self, u: Tensor, state: State) -> tuple[Tensor, State]:
        """Advance by ``u (B, H, T)``, any ``T``; returns ``(B, H', T)`` and the new state."""
        y, state, _, _ = self._chunks(u, state)
        return y, state

    def _chunks(self, u: Tensor, state: State) -> tuple[Tensor, State, list[Tensor], list[Tensor]]:
        """``u (B, H, L)`` in chunks of ``chunk`` frames: output, state, and per chunk the expert outputs and
        router probabilities (for the losses)."""
        outs, experts, probs = [], [], []
        for pos in range(0, int(u.shape[-1]), self.chunk):
            y, state, e, p = self._chunk(u[..., pos : pos + self.chunk], state)
            outs.append(y)
            experts.append(e)
            probs.append(p)
        y = torch.cat(outs, -1) if outs else u.new_zeros(int(u.shape[0]), self.h_out, 0)
        return y, state, experts, probs

    def counts(self) -> Counts:
        """Parameters and FLOPs per frame: projections, router, and per head ``4NP`` for the state update
        and readout (every expert advances: dense routing)."""
        m, p, n, h, e = self.heads, self.head_dim, self.n_states, self.h_in, self.experts
        proj = h * (m * p + 2 * n + m) + m * p * self.h_out + (m + h) * 2 * e
        params = proj + 3 * m + (m * p + 2 * n + m) + self.h_out + (2 * e if e else 0)
        flops = 2 * proj + m * (4 * n * p + 3 * p + 12) + 4 * h + e * (e + 8)
        return Counts(params, float(flops))

    # -- one chunk ---------------------------------------------------------------------------------

    def _running_mean(self, ut: Tensor, state: State, lower: Tensor) -> tuple[Tensor, State]:
        """``μ (B, T, H)`` for the chunk ``ut (B, T, H)`` and the new mean state; ``lower (T, T)`` the ones on
        and below the diagonal."""
        idx = torch.arange(int(ut.shape[1]), device=ut.device)
        if self.mean == "ema":
            (prev,) = state
            lag = (idx[:, None] - idx[None, :]).clamp_min(0).to(ut.dtype)
            weights = (1 - self.decay) * self.decay**lag * lower  # [t, s] = (1 - λ) λ^(t - s)
            carry = (self.decay ** (idx + 1).to(ut.dtype))[:, None]  # λ^(t + 1)
            mu = weights @ ut + carry * prev.unsqueeze(1)
            return mu, [mu[:, -1]]
        total, count = state
        sums = lower @ ut + total.unsqueeze(1)  # Σ_{s <= t} u_s
        counts = count.unsqueeze(1) + (idx + 1).to(ut.dtype)[:, None]
        return sums / counts, [sums[:, -1], counts[:, -1]]

    def _route(self, base: Tensor, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Δ bias ``(B, T, M)``, output weights ``(B, T, M)`` and expert probabilities ``(B, T, E)``."""
        b, t = int(base.shape[0]), int(base.shape[1])
        s, e = self.shared, self.experts
        ones = base.new_ones(b, t, s)
        if not e:
            return base.new_zeros(b, t, s), ones, base.new_zeros(b, t, 0)
        scores, bias = self.router(torch.cat([base, r], -1)).split(e, dim=-1)
        probs = torch.softmax(scores, -1)
        d = scores.detach()  # selection: rank by score (0 = best), ties split, no gradient
        rank = ((d.unsqueeze(-2) - d.unsqueeze(-1)) * _SHARP).clamp(0, 1).sum(-1)  # [i] = #{j: s_j > s_i}
        chosen = (self.top_q - rank).clamp(0, 1)
        picked = chosen * probs
        weights = self.top_q * picked / picked.sum(-1, keepdim=True).clamp_min(1e-30)
        return torch.cat([base.new_zeros(b, t, s), self.gamma * bias], -1), torch.cat([ones, weights], -1), probs

    def _chunk(self, u: Tensor, state: State) -> tuple[Tensor, State, Tensor, Tensor]:
        """One chunk ``u (B, H, T)``: output ``(B, H', T)``, state, expert outputs ``(B, E, T, P)``, probabilities."""
        b, t = int(u.shape[0]), int(u.shape[-1])
        m, p, n = self.heads, self.head_dim, self.n_states
        ut = u.transpose(1, 2)  # (B, T, H)
        x, bm, cm, base = self.in_proj(ut).split([m * p, n, n, m], dim=-1)
        x = x.reshape(b, t, m, p)
        idx = torch.arange(t, device=u.device)
        lower = (idx[:, None] >= idx[None, :]).to(u.dtype)  # [t, s] = 1 for s <= t
        mu, mean_state = self._running_mean(ut, state[:-1], lower)
        bias, weights, probs = self._route(base, ut - mu)
        dt = _softplus(base + self.dt_bias + bias)  # (B, T, M)
        log_a = (dt * -torch.exp(self.A_log)).transpose(1, 2)  # (B, M, T)
        cum = log_a @ lower.T  # Σ_{r <= t} log a_r: (B, M, T)
        seg = (cum.unsqueeze(-1) - cum.unsqueeze(-2)) * lower - (1 - lower) * _MASKED  # cum_t - cum_s, s <= t
        xs = (x * dt.unsqueeze(-1)).transpose(1, 2)  # Δ_s x_s: (B, M, T, P)
        h = state[-1]  # (B, M, N, P)
        cb = (cm @ bm.transpose(1, 2)).unsqueeze(1)  # C_t · B_s: (B, 1, T, T)
        y = (torch.exp(seg) * cb) @ xs + torch.exp(cum).unsqueeze(-1) * (cm.unsqueeze(1) @ h)
        y = y + self.D[:, None, None] * x.transpose(1, 2)
        to_end = torch.exp(cum[..., -1:] - cum)  # (B, M, T)
        h = torch.exp(cum[..., -1])[..., None, None] * h + (bm.transpose(1, 2).unsqueeze(1) * to_end.unsqueeze(2)) @ xs
        mixed = (y * weights.transpose(1, 2).unsqueeze(-1)).permute(0, 2, 1, 3).reshape(b, t, m * p)
        out = self.out_proj(mixed).transpose(1, 2)
        return out, [*mean_state, h], y[:, self.shared :], probs


def _balance(probs: Tensor) -> Tensor:
    """Squared coefficient of variation of the experts' mean probabilities ``probs (B, T, E)`` (eq. 15)."""
    importance = probs.reshape(-1, int(probs.shape[-1])).mean(0)
    return importance.var(unbiased=False) / (importance.mean() ** 2 + 1e-10)


def _diversity(y: Tensor) -> Tensor:
    """``E[(<ŷ_i, ŷ_j> - δ_ij)^2]`` over the ℓ2-normalised outputs ``y (B, E, T, P)`` of each example (eq. 16)."""
    flat = F.normalize(y.reshape(int(y.shape[0]), int(y.shape[1]), -1), dim=-1)
    gram = flat @ flat.transpose(1, 2)
    eye = torch.eye(int(y.shape[1]), dtype=y.dtype, device=y.device)
    return ((gram - eye) ** 2).mean()


def auxiliary_loss(model: nn.Module) -> tuple[Tensor | None, dict[str, Tensor]]:
    """The weighted training losses the blocks of ``model`` left from its last forward (HADES balance and
    diversity), summed, and their detached values by name for the log (tensors: read at log steps only);
    ``(None, {})`` when there are none."""
    total, parts = None, {}
    for module in model.modules():
        for name, value in getattr(module, "aux_losses", {}).items():
            total = value if total is None else total + value
            parts[name] = parts[name] + value.detach() if name in parts else value.detach()
    return total, parts
