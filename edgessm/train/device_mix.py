"""The tail of the keyword-spotting augmentation, batched on the training device.

On a GPU the data loader bounds training: a kws example costs ~1.5-2 ms of CPU (speed, noise, reverb,
microphone response, mixing), so 14 loader processes feed ~1,200 examples/s to a step that could take
~8,000. With ``train.device_augment`` the loader stops after drawing (:meth:`KwsAugment.plan`: speed and
shift applied, noise drawn, every other choice recorded) and this module applies the rest to the whole
batch at once, on the device, in the CPU path's order (:meth:`KwsAugment.finish`):

1. reverb: FFT convolution with the drawn RIR (the bank's spectra computed once), aligned on its direct
   path and cut to the clip, as :func:`edgessm.data.rir.reverb`;
2. noise at the drawn SNR over the clip's power (on a silent clip: at the drawn level);
3. microphone response: the drawn second-order sections' frequency response applied by FFT on a grid
   of 2T points (the slowest cascade the config can draw, a 50 Hz high-pass with narrow 150 Hz peaks, has
   fallen below 1e-14 of its peak within 4,000 samples: nothing wraps onto the clip), then the input's RMS;
4. gain, clipping to [-1, 1].

**Echo** (``train.echo = E``): each loaded batch trains E steps. Every repeat re-pairs the batch's
drawn parts at random: another example's noise, room and microphone (a permutation among the augmented
examples, so each part keeps the CPU's distribution and probability of being absent) and a fresh SNR and
gain. The speech repeats; its surroundings do not (Choi et al. 2019, *Faster Neural Network Training
with Data Echoing*, echo after augmentation).

Tensors of a batch (``mix_*``, made by :func:`mix_fields`): ``mix_on (B,)`` the example was augmented;
``mix_rir (B,)`` bank index, -1 none; ``mix_noise (B, T)`` and ``mix_has_noise (B,)``; ``mix_level_u (B,)``;
``mix_mic (B, S, 6)`` (identity sections pad) and ``mix_has_mic (B,)``; ``mix_gain_db (B,)`` and
``mix_has_gain (B,)``. The augmented clip is the last ``T`` samples of ``audio (B, 1, L)`` (context before
it is left as it is).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.augment import KwsAugment, KwsMix, max_mic_sections
from ..data.noise import _SILENT_POWER as SILENT_POWER  # the CPU path's: -100 dBFS counts as silence

_IDENTITY = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def mix_fields(mix: KwsMix | None, length: int, sections: int) -> dict[str, Any]:
    """The ``mix_*`` fields of one example (fixed shapes, so a batch stacks them); ``None``: the example
    is used as it is (validation, silence examples)."""
    mic = np.tile(np.array(_IDENTITY, np.float64), (sections, 1))
    fields: dict[str, Any] = {"mix_on": False, "mix_rir": -1, "mix_noise": np.zeros(length, np.float32),
                              "mix_has_noise": False, "mix_level_u": 0.0, "mix_mic": mic, "mix_has_mic": False,
                              "mix_gain_db": 0.0, "mix_has_gain": False}  # fmt: skip
    if mix is None:
        return fields
    if mix.speech.shape != (length,):
        raise ValueError(f"a planned clip has shape {mix.speech.shape}, expected ({length},)")
    fields.update(mix_on=True, mix_rir=int(mix.rir), mix_level_u=float(mix.level_u))
    if mix.noise is not None:
        fields.update(mix_noise=np.asarray(mix.noise, np.float32), mix_has_noise=True)
    if mix.mic is not None:
        if len(mix.mic) > sections:
            raise ValueError(f"a microphone response of {len(mix.mic)} sections; the batch holds {sections}")
        mic[: len(mix.mic)] = mix.mic
        fields.update(mix_mic=mic, mix_has_mic=True)
    if mix.gain_db is not None:
        fields.update(mix_gain_db=float(mix.gain_db), mix_has_gain=True)
    return fields


def _fast_len(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n (cuFFT and pocketfft are fastest there)."""
    from scipy.fft import next_fast_len

    return int(next_fast_len(n, real=True))


class DeviceMixer:
    """Applies :class:`KwsAugment`'s planned tail to batches on ``device`` (see the module docstring).

    Args:
        augment: the recipe's augmentation (its config and RIR bank; spectral masks are not supported).
        clip_samples: ``T``, the augmented part's length (the end of each example).
        device: where batches are mixed.
    """

    def __init__(self, augment: KwsAugment, clip_samples: int, device: torch.device | str = "cpu") -> None:
        cfg = augment.config
        if cfg.mask_prob > 0:
            raise ValueError("train.device_augment does not apply spectral masks: set augment.mask_prob = 0 "
                             "or train.device_augment = 'off'")  # fmt: skip
        self.cfg, self.t, self.device = cfg, int(clip_samples), torch.device(device)
        self.sections = max_mic_sections(cfg.mic)
        self.rir_spectra: Tensor | None = None
        if augment.rir_bank is not None:
            bank = augment.rir_bank
            self.n_rir = _fast_len(self.t + max(len(h) for h in bank.rirs) - 1)  # linear convolution, no wrap
            padded = np.zeros((len(bank), self.n_rir), np.float64)
            for i, h in enumerate(bank.rirs):
                padded[i, : len(h)] = h
            spectra = np.fft.rfft(padded, axis=-1).astype(np.complex64)
            self.rir_spectra = torch.from_numpy(spectra).to(self.device)
            self.directs = torch.as_tensor(np.asarray(bank.directs, np.int64), device=self.device)
        self.n_mic = _fast_len(2 * self.t)  # a response's tail beyond T samples wraps onto the clip's start

    def __call__(self, batch: dict[str, Any], generator: torch.Generator | None = None,
                 echo: bool = False) -> dict[str, Any]:  # fmt: skip
        """``batch`` with its clips augmented (a new ``audio``; the batch's tensors are not modified).
        ``echo``: re-pair the drawn parts at random first (``generator`` on the batch's device)."""
        audio = batch["audio"]
        if audio.shape[-1] < self.t:
            raise ValueError(f"examples of {audio.shape[-1]} samples are shorter than the clip ({self.t})")
        m = {k: v for k, v in batch.items() if k.startswith("mix_")}
        if echo:
            m = self._repair(m, generator)
        x = audio[:, 0, -self.t :].float()
        x = self._reverb(x, m["mix_rir"])
        x = self._noise(x, m)
        x = torch.where(m["mix_has_mic"][:, None], self._mic(x, m["mix_mic"]), x)
        gain = torch.where(m["mix_has_gain"], 10.0 ** (m["mix_gain_db"].float() / 20.0), torch.ones_like(x[:, 0]))
        x = x * gain[:, None]
        if self.cfg.clip:
            x = x.clamp(-1.0, 1.0)
        on = m["mix_on"][:, None]
        x = torch.where(on, x, audio[:, 0, -self.t :].float()).to(audio.dtype)
        return {**batch, "audio": torch.cat([audio[:, :, : -self.t], x[:, None]], dim=-1)}

    def _repair(self, m: dict[str, Tensor], generator: torch.Generator | None) -> dict[str, Tensor]:
        """Another example's noise, room and microphone for every augmented example; fresh SNR and gain."""
        on = m["mix_on"]
        out = dict(m)
        for keys in (("mix_noise", "mix_has_noise"), ("mix_rir",), ("mix_mic", "mix_has_mic"), ("mix_has_gain",)):
            src = shuffle_within(on, generator)
            out.update({k: m[k][src] for k in keys})
        u = torch.rand(on.shape, generator=generator, device=on.device, dtype=torch.float64)
        out["mix_level_u"] = torch.where(on, u, m["mix_level_u"].double())
        lo, hi = self.cfg.gain_db
        g = lo + (hi - lo) * torch.rand(on.shape, generator=generator, device=on.device, dtype=torch.float64)
        out["mix_gain_db"] = torch.where(on, g, m["mix_gain_db"].double())
        return out

    def _reverb(self, x: Tensor, rir: Tensor) -> Tensor:
        if self.rir_spectra is None:
            return x
        i = rir.clamp_min(0)
        y = torch.fft.irfft(torch.fft.rfft(x, n=self.n_rir) * self.rir_spectra[i], n=self.n_rir)
        at = self.directs[i][:, None] + torch.arange(self.t, device=x.device)  # aligned on the direct path
        return torch.where((rir >= 0)[:, None], torch.gather(y, 1, at), x)

    def _noise(self, x: Tensor, m: dict[str, Tensor]) -> Tensor:
        noise = m["mix_noise"].to(torch.float64)
        pc = x.to(torch.float64).square().mean(-1)
        pn = noise.square().mean(-1)
        u = m["mix_level_u"].to(torch.float64)
        snr = self.cfg.snr_db[0] + (self.cfg.snr_db[1] - self.cfg.snr_db[0]) * u
        level = self.cfg.silence_noise_dbfs[0] + (self.cfg.silence_noise_dbfs[1] - self.cfg.silence_noise_dbfs[0]) * u
        pn_safe = pn.clamp_min(SILENT_POWER)
        at_snr = torch.sqrt(pc / (pn_safe * 10.0 ** (snr / 10.0)))  # add_noise: the SNR over the clip's power
        at_level = 10.0 ** (level / 20.0) / torch.sqrt(pn_safe)  # set_level on a silent clip
        scale = torch.where(pc > SILENT_POWER, at_snr, at_level)
        scale = torch.where((pn > SILENT_POWER) & m["mix_has_noise"], scale, torch.zeros_like(scale))
        return (x.to(torch.float64) + scale[:, None] * noise).to(x.dtype)

    def _mic(self, x: Tensor, sos: Tensor) -> Tensor:
        """``x (B, T)`` through each example's sections ``sos (B, S, 6)``, back at the input's RMS. The
        cascade is one rational function (numerator and denominator polynomials multiplied out, float64),
        evaluated on an FFT grid of ``n_mic >= 2T`` points by two FFTs of its coefficients."""
        sos = sos.to(torch.float64)
        num, den = sos[:, 0, :3], sos[:, 0, 3:]
        for k in range(1, sos.shape[1]):
            num, den = _poly_mul(num, sos[:, k, :3]), _poly_mul(den, sos[:, k, 3:])
        h = (torch.fft.rfft(num, n=self.n_mic) / torch.fft.rfft(den, n=self.n_mic)).to(torch.complex64)
        y = torch.fft.irfft(torch.fft.rfft(x, n=self.n_mic) * h, n=self.n_mic)[:, : self.t]
        px, py = x.to(torch.float64).square().mean(-1), y.to(torch.float64).square().mean(-1)
        keep = (px > SILENT_POWER) & (py > SILENT_POWER)
        scale = torch.where(keep, torch.sqrt(px / py.clamp_min(SILENT_POWER)), torch.ones_like(px))
        return y * scale[:, None].to(y.dtype)


def shuffle_within(on: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Source indices ``(B,)`` of a random permutation of the positions where ``on (B,)`` is true; the
    others map to themselves. Made without reading anything back to the host (no sync on a GPU): the
    ``on`` positions sorted first in index order (``order``) and in random order (``shuffled``) pair up."""
    b = on.shape[0]
    rank = torch.arange(b, device=on.device, dtype=torch.float64) / b
    order = torch.argsort((~on).double() * 2 + rank)  # on positions first, each group in index order
    noise = torch.rand(b, generator=generator, device=on.device, dtype=torch.float64)
    shuffled = torch.argsort((~on).double() * 2 + noise)  # on positions first, in random order
    src = torch.empty_like(order)
    src[order] = torch.where(on[order], shuffled, order)
    return src


def _poly_mul(p: Tensor, q: Tensor) -> Tensor:
    """Row-wise product of polynomials in z^-1: ``p (B, m)`` times ``q (B, 3)`` -> ``(B, m + 2)`` (one
    grouped convolution: a group per row)."""
    return F.conv1d(F.pad(p, (2, 2))[None], q.flip(-1)[:, None], groups=p.shape[0])[0]
