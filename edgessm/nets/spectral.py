"""Spectral-mask denoiser: Centaurus SSM blocks estimate real gains on a short-time spectrum.

    x (B, 1, T) -> frames of n_fft = 2 hop samples (sqrt-Hann) -> real DFT X (bins)
      -> features: log ERB band powers (bands) and log powers of the lowest fine_bins bins
      -> SSM blocks at 16000 / hop frames per second -> sigmoid gains: one per ERB band (spread over
         the bins it covers) and one per fine bin (the harmonics below ~1.6 kHz)
      -> Y = g X -> inverse DFT, sqrt-Hann, overlap-add -> y (B, 1, T), ``delay = hop`` samples late

Why not only the paper's raw-waveform hourglass (``nets/denoise.py``): trained on this project's CPU
budget (two runs, 6-8k steps) it lowered PESQ below its input. What a mask can reach at all is set by
its frequency resolution; measured with oracle gains on the test mixtures (clean magnitudes known):
64 second-order SSM resonator bands give PESQ 1.9, 32 ERB bands of a 20 ms DFT 2.55, plus 32 fine bins
2.95 (noisy input 1.26). So the resolution comes from a fixed DFT and the SSM blocks do what they are
good at: long causal context over frames. Gains near 1 at the start make training begin at the identity.

Deep filtering (``df_order`` K > 0, after DeepFilterNet): a real gain cannot separate a harmonic from noise
inside one 50 Hz bin, a complex filter over the last K frames of that bin can (it follows the phase advance
of a partial). For the lowest ``df_bins`` bins the network also reads the phase advance since the last
frame, ``X_t conj(X_{t-1}) / |.|`` (cos and sin, added to the features through a 1x1 projection that
starts at zero), and adds ``Σ_k d_{t,k} X_{t-k}`` (``d`` complex, ``tanh``
bounded, zero at initialisation: the filter starts switched off) to the gain-masked bin. The filter looks
only backwards, so the latency does not change.

With ``df_gated`` the filter's addition passes through the bin's own gain too: ``Y = g (X + Σ_k d_{t,k}
X_{t-k})``. Ungated, the filter's sum of noisy frames reaches the output whatever the gain says; in pauses the
gain is near zero but the filter is not (v8 in the pauses of its validation mixtures: 0-1 kHz 34-36 dB under
the speech, RNNoise 52-56 dB), and DNSMOS BAK hears it. Gated, the mask decides how much of a bin is kept and
the filter only what it is made of.

Streaming is exact: a chunk of ``m hop`` samples advances ``m`` frames. The state holds the last ``hop``
input samples (the first half of the next frame), the blocks' states and the second half of the last
synthesised frame, which the next frame's first half completes. Output sample ``t`` of a chunk is
therefore the denoised input sample ``t - hop`` (``delay``): the algorithmic latency is one frame
(``n_fft`` samples, 20 ms at the defaults), of which the chunk is the first half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.dsp import erb_expansion, erb_filterbank, rdft_matrices, sqrt_hann
from edgessm.ssm import CentaurusBlock, Counts, ElasticBudget, Streamable
from edgessm.ssm.stream import State, graph_form

from .backbone import WAVEFORM_RATE, BlockOptions
from .widen import widen_weights


@dataclass
class SpectralDenoiserConfig(BlockOptions):
    arch: str = "spectral"
    hop: int = 160  # samples per frame step (10 ms); the DFT is 2 hop points
    bands: int = 32  # ERB bands: features and gains
    fine_bins: int = 32  # the lowest DFT bins get their own gain (32 bins of 50 Hz: 0-1.6 kHz)
    channels: list[int] = field(default_factory=lambda: [128, 128, 128, 128])
    states: list[int] = field(default_factory=lambda: [32, 32, 64, 64])
    kinds: list[str] = field(default_factory=lambda: ["bottleneck", "bottleneck", "pointwise", "pointwise"])
    n_sub: int = 4
    dropout: float = 0.0
    floor: float = 1e-10  # added to powers before the log (digital silence -> log(floor))
    gain_bias: float = 3.0  # initial gain logit: sigmoid(3) = 0.95, so training starts near the identity
    # Initial step sizes of the blocks' modes, in frames: a mode of Δ decays over ~2/Δ frames. The paper's
    # waveform range (1e-3..1e-1) is 0.2-20 s at 100 frames/s; a mask must also follow 20-50 ms onsets.
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    pre_conv: int = 0  # causal depthwise Conv1d over this many frames before each SSM (0: none)
    df_order: int = 0  # deep filter over this many frames (the current one and K - 1 before it; 0: none)
    df_bins: int = 32  # the lowest DFT bins the deep filter acts on (with df_order > 0)
    df_gated: bool = False  # the filter's addition scaled by the bin's gain: Y = g (X + Σ d X) (module docstring)


def _pointwise(conv: nn.Conv1d, h: Tensor) -> Tensor:
    """A 1x1 ``conv`` on ``h (B, C, m)``, returned frames first: ``(B, m, out)``; in PyTorch one matrix product
    (on a CPU it runs some 1x1 convolutions with its slow generic kernel), in a graph the Conv it exports as."""
    if torch.onnx.is_in_onnx_export():
        return conv(h).transpose(1, 2)
    return F.linear(h.transpose(1, 2), conv.weight[:, :, 0], conv.bias)


class SpectralDenoiser(ElasticBudget, Streamable):
    """``(B, 1, T) -> (B, 1, T)``, ``T`` a multiple of ``hop``; output sample ``t`` denoises input ``t - delay``."""

    def __init__(self, cfg: SpectralDenoiserConfig) -> None:
        super().__init__()
        if cfg.arch != "spectral":
            raise ValueError(f"SpectralDenoiser builds arch 'spectral', got {cfg.arch!r}")
        n = len(cfg.channels)
        if not (len(cfg.states) == len(cfg.kinds) == n) or n == 0:
            raise ValueError("channels, states and kinds must have one entry per block (at least one)")
        n_fft = 2 * cfg.hop
        bins = n_fft // 2 + 1
        if not 0 <= cfg.fine_bins <= bins:
            raise ValueError(f"fine_bins must be in [0, {bins}] for hop {cfg.hop}, got {cfg.fine_bins}")
        if cfg.df_order < 0 or (cfg.df_order and not 1 <= cfg.df_bins <= bins):
            raise ValueError(f"df_order must be >= 0 and df_bins in [1, {bins}], got {cfg.df_order}, {cfg.df_bins}")
        self.cfg, self.hop, self.n_fft, self.bins = cfg, cfg.hop, n_fft, bins
        self.df_bins = cfg.df_bins if cfg.df_order else 0
        self.df_past = max(cfg.df_order - 1, 1) if cfg.df_order else 0  # earlier frames kept for the filter
        window = sqrt_hann(n_fft)
        forward, inverse = rdft_matrices(n_fft)
        self.register_buffer("analysis", window[:, None] * forward, persistent=False)  # (n_fft, 2 bins)
        self.register_buffer("synthesis", inverse * window[None, :], persistent=False)  # (2 bins, n_fft)
        self.register_buffer("window", window, persistent=False)  # the FFT path's (``_dft``)
        self.register_buffer("band_power", erb_filterbank(n_fft, cfg.bands).T.contiguous(), persistent=False)
        # Two maps on [Re | Im] spectra, one matrix each (one MatMul per frame in the graph): squared
        # [Re | Im] -> [ERB band powers | fine-bin powers], and those gains -> a gain for every [Re | Im] entry
        fine = torch.eye(bins, cfg.fine_bins)  # bin i <- fine gain / power i
        per_bin = torch.cat([self.band_power, fine], dim=1)  # (bins, bands + fine)
        self.register_buffer("power_map", torch.cat([per_bin, per_bin]), persistent=False)  # (2 bins, features)
        spread = erb_expansion(n_fft, cfg.bands)  # (bands, bins): each band's gain spread over its bins
        spread[:, : cfg.fine_bins] = 0.0  # the fine bins take their own gains only
        gain_map = torch.cat([spread, fine.T])  # (bands + fine, bins)
        self.register_buffer("gain_map", torch.cat([gain_map, gain_map], dim=1), persistent=False)  # (., 2 bins)
        features = cfg.bands + cfg.fine_bins
        # log powers of a speech-level input lie around -8 +- 6: start near zero mean, unit scale
        self.shift = nn.Parameter(torch.full((features,), -8.0))
        self.scale = nn.Parameter(torch.full((features,), 0.25))
        rate = WAVEFORM_RATE / cfg.hop
        widths = [features, *cfg.channels]
        self.blocks = nn.ModuleList()
        for i, kind in enumerate(cfg.kinds):
            kw = cfg.block_kwargs(kind, rate)
            if kind not in ("essm", "rtf"):  # the blocks with diagonal modes and their Δ grid
                kw.update(dt_min=cfg.dt_min, dt_max=cfg.dt_max)
            block = CentaurusBlock(kind, widths[i], widths[i + 1], cfg.states[i], cfg.n_sub, pre_conv=cfg.pre_conv,
                                   dropout=cfg.dropout, **kw)  # fmt: skip
            cfg.bound_memory(block, rate)
            self.blocks.append(block)
        self.head = nn.Conv1d(widths[-1], cfg.bands + cfg.fine_bins, 1)
        with torch.no_grad():
            self.head.weight.mul_(0.1)
            self.head.bias.fill_(cfg.gain_bias)
        self.df_head = self.df_in = None
        if cfg.df_order:
            # the deep-filter bins' phase advances join the features through a projection that starts at zero,
            # so a network given a deep filter starts as the one it is fine-tuned from (`--init-partial`)
            self.df_in = nn.Conv1d(2 * self.df_bins, features, 1)
            nn.init.zeros_(self.df_in.weight)
            nn.init.zeros_(self.df_in.bias)
            # channels [k][re, im][bin]; zero: the filter starts switched off
            self.df_head = nn.Conv1d(widths[-1], 2 * cfg.df_order * self.df_bins, 1)
            nn.init.zeros_(self.df_head.weight)
            nn.init.zeros_(self.df_head.bias)
            self._deep_filter_maps(cfg.df_order, self.df_bins)
        self.delay = cfg.hop
        self.chunk_multiple = cfg.hop
        self.rate = Fraction(1)

    # --- the pieces, shared by forward and step ---------------------------------------------------------

    def _frames(self, x: Tensor, history: Tensor) -> tuple[Tensor, Tensor]:
        """``x (B, 1, m hop)`` after ``history (B, 1, hop)`` -> frames ``(B, m, n_fft)`` and the new history."""
        b, hop = int(x.shape[0]), self.hop
        m = int(x.shape[-1]) // hop
        if m == 1:  # a live 10 ms chunk: the frame is the history and the chunk (fewest graph nodes)
            return torch.cat([history, x], dim=-1), x
        blocks = torch.cat([history, x], dim=-1).reshape(b, m + 1, hop)
        frames = torch.cat([blocks[:, :-1], blocks[:, 1:]], dim=-1)
        return frames, blocks[:, -1:].reshape(b, 1, hop)

    def _dft(self, frames: Tensor) -> Tensor:
        """Frames ``(B, m, n_fft)`` -> sqrt-Hann windowed spectra ``(B, m, 2 bins)`` (``[Re | Im]``).

        One matrix product in a graph (a live call, or an export); otherwise an FFT, ~15x fewer operations."""
        if graph_form(int(frames.shape[1])):
            return frames @ self.analysis
        z = torch.fft.rfft(frames.float() * self.window, dim=-1)
        return torch.cat([z.real, z.imag], dim=-1).to(frames.dtype)

    def _inverse_dft(self, spec: Tensor) -> Tensor:
        """Spectra ``(B, m, 2 bins)`` -> sqrt-Hann windowed frames ``(B, m, n_fft)``, as :meth:`_dft` chooses."""
        if graph_form(int(spec.shape[1])):
            return spec @ self.synthesis
        z = spec.float()
        frames = torch.fft.irfft(torch.complex(z[..., : self.bins], z[..., self.bins :]), n=self.n_fft, dim=-1)
        return (frames * self.window).to(spec.dtype)

    def _features(self, spec: Tensor) -> Tensor:
        """``[Re | Im]`` spectra ``(B, m, 2 bins)`` -> normalised log powers ``(B, m, features)``."""
        logs = torch.log(self._powers(spec) + self.cfg.floor)
        return (logs - self.shift) * self.scale

    def _coarse_gains(self, h: Tensor) -> Tensor:
        """Block output ``(B, C, m)`` -> the network's own gains ``(B, m, bands + fine_bins)`` in (0, 1)."""
        return torch.sigmoid(_pointwise(self.head, h))

    def _powers(self, spec: Tensor) -> Tensor:
        """``[Re | Im]`` spectra ``(B, m, 2 bins)`` -> powers at the gains' resolution ``(B, m, bands + fine)``:
        ERB band powers (``band_power``) and the powers of the lowest ``fine_bins`` bins."""
        return (spec * spec) @ self.power_map

    def oracle_gains(self, noisy: Tensor, clean: Tensor, floor: float = 1e-9,
                     exponent: float = 0.5) -> tuple[Tensor, Tensor]:  # fmt: skip
        """The ideal ratio mask at the network's resolution, for training the gains directly (as RNNoise
        does): per ERB band and fine bin, ``(S / (S + N)) ** exponent`` with ``S`` the power of ``clean``
        and ``N`` that of ``noisy - clean`` (noise, and the reverberation the target leaves out) in the same frames
        the network masks. ``noisy``, ``clean`` ``(B, 1, T)`` aligned -> ``(target, valid)``, both
        ``(B, m, bands + fine_bins)``; ``valid`` is 0 where the frame holds no signal (no answer exists).
        ``exponent`` 0.5 is the amplitude ratio, 1 the Wiener gain (more noise and more speech removed)."""
        zeros = noisy.new_zeros(int(noisy.shape[0]), 1, self.hop)
        s = self._powers(self._dft(self._frames(clean, zeros)[0]))
        n = self._powers(self._dft(self._frames(noisy - clean, zeros)[0]))
        total = s + n
        return (s / total.clamp_min(floor)) ** exponent, (total > floor).to(s.dtype)

    def apply_gains(self, x: Tensor, gains: Tensor) -> Tensor:
        """``x (B, 1, T)`` masked with given gains ``(B, T / hop, bands + fine_bins)`` (e.g. :meth:`oracle_gains`)
        through the same DFT, band spreading and overlap-add as the network: ``(B, 1, T)``, ``delay`` late."""
        zeros = x.new_zeros(int(x.shape[0]), 1, self.hop)
        return self._synthesise(self._dft(self._frames(x, zeros)[0]), gains, zeros)[0]

    def _synthesise(self, spec: Tensor, gains: Tensor, tail: Tensor) -> tuple[Tensor, Tensor]:
        """Spectra ``(B, m, 2 bins)`` masked by gains ``(B, m, bands + fine_bins)`` after ``tail`` -> the
        waveform ``(B, 1, m hop)`` and the new tail (inverse DFT, sqrt-Hann, overlap-add)."""
        return self._overlap_add(self._inverse_dft(self._masked(spec, gains)), tail)

    def _spread(self, gains: Tensor) -> Tensor:
        """Gains ``(B, m, bands + fine_bins)`` -> one per ``[Re | Im]`` entry ``(B, m, 2 bins)``: band gains spread
        over their bins (:func:`~edgessm.dsp.erb_expansion`), the fine bins' own gains below, the same on ``Re``
        and ``Im``."""
        return gains @ self.gain_map

    def _masked(self, spec: Tensor, gains: Tensor) -> Tensor:
        """Spectra ``(B, m, 2 bins)`` times gains ``(B, m, bands + fine_bins)`` (:meth:`_spread`)."""
        return spec * self._spread(gains)

    def adapt_weights(self, weights: dict[str, Tensor]) -> dict[str, Tensor]:
        """``weights`` of a narrower network, or of one with a deep filter over fewer bins, laid out for this one.

        Narrower blocks grow to this network's channels (each channel repeated, the weights that read them split:
        :func:`~edgessm.nets.widen.widen_weights`; ``--init OLD --set "model.channels=[256, ...]"``).

        A deep filter grows to more bins: the phase-advance projection ``df_in`` takes ``[Re | Im]`` of the bins,
        the coefficient head ``df_head`` gives channels ``[k][re, im][bin]``: the old bins keep their weights in
        the new layout, the new bins get zeros, as a deep filter starts (no phase features, coefficients
        ``tanh(0) = 0``). So the grown network computes exactly what the old one did, and fine-tuning
        (``edgessm train ... --init OLD --set model.df_bins=64``) starts there. Other weights, and weights
        already of this size, pass unchanged."""
        weights = widen_weights(self, weights, readers={"head.weight": 1, "df_head.weight": 1})
        if self.df_in is None or "df_in.weight" not in weights or "df_head.weight" not in weights:
            return weights
        old = int(weights["df_in.weight"].shape[1]) // 2
        new, order = self.df_bins, self.cfg.df_order
        rows = int(weights["df_head.weight"].shape[0])
        if old >= new or rows != 2 * order * old:  # the same size, a larger one, or another order: not grown here
            return weights
        out = dict(weights)
        w = weights["df_in.weight"]
        grown = w.new_zeros(w.shape[0], 2 * new, *w.shape[2:])
        grown[:, :old], grown[:, new : new + old] = w[:, :old], w[:, old:]
        out["df_in.weight"] = grown
        for name in ("df_head.weight", "df_head.bias"):
            t = weights[name]
            t_new = t.new_zeros(2 * order * new, *t.shape[1:])
            t_new.view(order, 2, new, -1)[:, :, :old] = t.reshape(order, 2, old, -1)
            out[name] = t_new
        return out

    def _low(self, spec: Tensor) -> Tensor:
        """``[Re | Im]`` of the deep-filter bins: ``(B, m, 2 bins) -> (B, m, 2 df_bins)``."""
        f = self.df_bins
        return torch.cat([spec[..., :f], spec[..., self.bins : self.bins + f]], dim=-1)

    def _windows(self, low: Tensor) -> Tensor:
        """Frames of deep-filter bins ``(B, P + m, 2 F)`` (``P`` earlier ones first) -> for each of the last ``m``
        the window of it and the ``P`` frames before it, ``[X_{t-P} | ... | X_t]``: ``(B, m, (P + 1) 2 F)``
        (a live 10 ms call: one reshape)."""
        b, p = int(low.shape[0]), self.df_past
        m = int(low.shape[1]) - p
        if m == 1:
            return low.reshape(b, 1, -1)
        return torch.cat([low[:, i : i + m] for i in range(p + 1)], dim=-1)

    def _phasors(self, window: Tensor) -> Tensor:
        """Windows ``(B, m, (P + 1) 2 F)`` -> the unit phasors of the deep-filter bins' phase advances
        ``X_t conj(X_{t-1})``, ``(B, m, 2 F)`` (``[cos | sin]``; 0 in silence).

        ``Re = X_re P_re + X_im P_im`` and ``Im = X_im P_re - X_re P_im`` (``P = X_{t-1}``) are one product of
        two gathers and one constant matrix; the norm is one more (few nodes in the 10 ms graph)."""
        pair = window[..., self.pa_a] * window[..., self.pa_b]  # (B, m, 4F): the four products
        u = pair @ self.pa_sum  # (B, m, 2F): [Re | Im]
        return u / torch.sqrt((u * u) @ self.pa_norm + self.cfg.floor**2)

    def _phase_features(self, window: Tensor) -> Tensor:
        """What the phase advances add to the features: :meth:`_phasors` through the projection ``df_in``,
        ``(B, m, features)``."""
        return self._phasors(window) @ self.df_in.weight[:, :, 0].T + self.df_in.bias

    def _deep_filter_maps(self, order: int, f: int) -> None:
        """Constant index maps of the phase advances and the filter on windows ``[X_{t-P} | ... | X_t]`` (each
        ``[Re | Im]`` of the ``f`` bins): per-node costs weigh in the 10 ms graph, so the complex products of
        all taps are a few whole-window nodes (gathers, products, constant matrices) rather than slices per tap."""
        c, p = 2 * f, self.df_past
        j = torch.arange(f)
        cur, prev = p * c, (p - 1) * c  # where X_t and X_{t-1} start in the window
        self.register_buffer("pa_a", torch.cat([cur + j, cur + f + j, cur + f + j, cur + j]), persistent=False)
        self.register_buffer("pa_b", torch.cat([prev + j, prev + f + j, prev + j, prev + f + j]), persistent=False)
        total = torch.zeros(4 * f, c)  # [Xr Pr | Xi Pi | Xi Pr | Xr Pi] -> [Re | Im]
        total[j, j] = total[f + j, j] = total[2 * f + j, f + j] = 1.0
        total[3 * f + j, f + j] = -1.0
        self.register_buffer("pa_sum", total, persistent=False)
        norm = torch.zeros(c, c)  # [Re^2 | Im^2] -> [|u|^2 | |u|^2]
        for a in (j, f + j):
            norm[a, j] = norm[a, f + j] = 1.0
        self.register_buffer("pa_norm", norm, persistent=False)
        # the filter's taps: the last ``order`` frames of the window (all of it when order >= 2)
        n, skip = order * c, (p + 1 - order) * c
        pos = torch.arange(n)
        w, r, jj = pos // c, (pos % c) // f, pos % f  # tap frame, re/im, bin of each tap entry
        k = order - 1 - w  # tap frame w is X_{t-k}; d's channels are [k][re, im][bin]
        # For each tap, ``d X = (d_re + i d_im)(X_re + i X_im)``, i.e. ``[Re | Im] = d_re [X_re | X_im]
        # + d_im [-X_im | X_re]``: one gather puts the coefficients in that layout, one the taps (``[X | swapped
        # X]``), and one constant matrix sums the products over the taps with the signs
        self.register_buffer("df_rows", torch.cat([k * c + jj, k * c + f + jj]), persistent=False)
        self.register_buffer("df_taps", skip + torch.cat([pos, w * c + (1 - r) * f + jj]), persistent=False)
        sign = torch.cat([torch.ones(n), torch.where(r == 0, -1.0, 1.0)])
        self.register_buffer("df_sum", sign[:, None] * (torch.arange(2 * n)[:, None] % c == torch.arange(c)),
                             persistent=False)  # fmt: skip
        place = torch.zeros(c, 2 * self.bins)  # [Re | Im] of the F bins -> [Re | Im] of all bins
        place[torch.arange(c), torch.arange(c) // f * self.bins + torch.arange(c) % f] = 1.0
        self.register_buffer("df_place", place, persistent=False)

    def _deep_filter(self, masked: Tensor, window: Tensor, h: Tensor, gains: Tensor | None = None) -> Tensor:
        """Add ``Σ_k d_{t,k} X_{t-k}`` to the deep-filter bins of the masked spectra ``(B, m, 2 bins)``;
        ``window`` the unmasked bins' windows (:meth:`_windows`), ``h`` the blocks' output ``(B, C, m)``;
        ``gains`` ``(B, m, 2 bins)``: the addition is scaled by them too (``df_gated``)."""
        d = torch.tanh(_pointwise(self.df_head, h))  # (B, m, K 2F)
        taps = self._coefficients(d) * window[..., self.df_taps]  # (B, m, 2 K 2F)
        added = (taps @ self.df_sum) @ self.df_place  # summed over the taps, placed in the F bins
        return masked + (added if gains is None else added * gains)

    def _coefficients(self, d: Tensor) -> Tensor:
        """The coefficients ``d (B, m, K 2F)`` in the layout of the taps (``d[..., df_rows]``): ``(B, m, 2 K 2F)``.

        A graph gathers (one node); a longer input is reshaped in PyTorch, because a gather's gradient is a
        scatter-add, the slowest part of a training step's deep filter on a CPU. Per tap frame ``w`` (tap
        ``X_{t-k}``, ``k = K - 1 - w``) the ``[re | im]`` taps take ``d_re`` of their bins, then ``d_im``."""
        if graph_form(int(d.shape[1])):
            return d[..., self.df_rows]
        b, m, f, k = int(d.shape[0]), int(d.shape[1]), self.df_bins, self.cfg.df_order
        per_tap = d.reshape(b, m, k, 2, 1, f).flip(2).expand(b, m, k, 2, 2, f)  # [tap w][re, im of d][X re, im][bin]
        return per_tap.transpose(2, 3).reshape(b, m, 4 * k * f)

    def _overlap_add(self, frames: Tensor, tail: Tensor) -> tuple[Tensor, Tensor]:
        """Synthesised frames ``(B, m, n_fft)`` after ``tail (B, 1, hop)`` -> ``(B, 1, m hop)`` and the new tail."""
        b, m, hop = int(frames.shape[0]), int(frames.shape[1]), self.hop
        first, second = frames[..., :hop], frames[..., hop:]
        if m == 1:  # a live 10 ms chunk
            return first + tail, second
        previous = torch.cat([tail.reshape(b, 1, hop), second[:, :-1]], dim=1)
        return (first + previous).reshape(b, 1, m * hop), second[:, -1:].reshape(b, 1, hop)

    def _run(self, x: Tensor, state: State | None) -> tuple[Tensor, State, Tensor, Tensor]:
        b = int(x.shape[0])
        if state is None:  # the parallel path starts from silence, as a fresh stream does
            history = tail = x.new_zeros(b, 1, self.hop)
            past = x.new_zeros(b, self.df_past, 2 * self.df_bins)
        else:
            history, tail = state[0], state[-1]
            past = state[-2] if self.df_bins else None
        frames, history = self._frames(x, history)
        spec = self._dft(frames)  # (B, m, 2 bins)
        h = self._features(spec)
        low = window = None
        if self.df_bins:
            low = torch.cat([past, self._low(spec)], dim=1)  # (B, P + m, 2 F)
            window = self._windows(low)
            h = h + self._phase_features(window)
        h = h.transpose(1, 2)  # (B, features, m)
        new: State = [history]
        pos = 1
        for block in self.blocks:
            if state is None:
                h = block(h)
            else:
                k = len(block.state_shapes())
                h, s = block.step(h, state[pos : pos + k])
                new.extend(s)
                pos += k
        coarse = self._coarse_gains(h)
        gains = self._spread(coarse)
        out = spec * gains
        if low is not None:
            out = self._deep_filter(out, window, h, gains if self.cfg.df_gated else None)
            new.append(low[:, -self.df_past :])
        y, tail = self._overlap_add(self._inverse_dft(out), tail)
        return y, [*new, tail], coarse, out

    # --- the streaming contract -------------------------------------------------------------------------

    def forward(self, x: Tensor, with_gains: bool = False, with_spectra: bool = False) -> Tensor | tuple[Tensor, ...]:
        """``x (B, 1, T)`` -> ``y (B, 1, T)``, ``delay`` samples late; with ``with_gains`` also the gains
        ``(B, T / hop, bands + fine_bins)`` (what :meth:`oracle_gains` is the target for), with ``with_spectra``
        the enhanced spectra ``(B, T / hop, 2 bins)`` (``[Re | Im]``, compare with :meth:`spectra` of the target)."""
        self.check_chunk(x)
        y, _, coarse, out = self._run(x, None)
        if not (with_gains or with_spectra):
            return y
        return (y, *([coarse] if with_gains else []), *([out] if with_spectra else []))

    def spectra(self, x: Tensor) -> Tensor:
        """The frames ``(B, T / hop, 2 bins)`` (``[Re | Im]``) the network enhances, for ``x (B, 1, T)``."""
        return self._dft(self._frames(x, x.new_zeros(int(x.shape[0]), 1, self.hop))[0])

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        self.check_chunk(x)
        return self._run(x, state)[:2]

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        shapes = [("history", (1, self.hop))]
        for i, block in enumerate(self.blocks):
            shapes += [(f"block{i}.{n}", s) for n, s in block.state_shapes()]
        if self.df_bins:
            shapes.append(("df_past", (self.df_past, 2 * self.df_bins)))
        return [*shapes, ("tail", (1, self.hop))]

    def counts(self) -> Counts:
        """Parameters and FLOPs per input sample: the DFTs, features and mask per frame, the blocks at the
        frame rate (one multiply-add = 2 FLOPs)."""
        cfg, bins, n_fft = self.cfg, self.bins, self.n_fft
        features = cfg.bands + cfg.fine_bins
        per_frame = 2 * (2 * n_fft * 2 * bins)  # analysis and synthesis matrix products
        per_frame += 3 * bins + 2 * bins * cfg.bands + 3 * features  # power, ERB bands, log and affine
        per_frame += 2 * self.head.weight.numel() + 4 * features + 2 * cfg.bands * bins + 2 * bins  # head, mask
        params = 2 * features + self.head.weight.numel() + self.head.bias.numel()
        if self.df_head is not None:  # phase advances, the coefficient head and the filter itself
            f, order = self.df_bins, cfg.df_order
            per_frame += 10 * f + 2 * (self.df_in.weight.numel() + features)  # phase advances, projection, sum
            per_frame += 2 * self.df_head.weight.numel() + 2 * order * f + 8 * order * f
            per_frame += 2 * bins if cfg.df_gated else 0  # the filter's addition times the gains
            params += sum(p.numel() for p in (*self.df_in.parameters(), *self.df_head.parameters()))
        blocks = Counts(0, 0.0)
        for block in self.blocks:
            blocks = blocks + block.counts()
        return Counts(params + blocks.params, (per_frame + blocks.flops) / cfg.hop)
