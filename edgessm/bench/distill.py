"""SpectraLDS distillation report: states, accuracy and float32 behaviour of the distilled Hankel filters.

``python -m edgessm.bench.distill [--lengths 1024 4096] [--kmax 16 32] [--tols 3e-3 1e-3 3e-4 1e-4]``

For every ``(L, K̄)`` and distillation tolerance it prints:

* ``h``: total LDS states per channel, and the states a budget ``K`` streams with (``S_K``);
* ``fit``: the worst in-window relative ℓ2 error of a distilled filter (``<= tol`` when converged);
* ``|C|``: the largest readout coefficient in the orthonormal (cascade) coordinates used for
  streaming, against ``|C| modal``: plain least squares on the same poles in the modal basis;
* ``f32 bank``: worst per-filter error of a float32 per-sample recurrence against its float64 self
  over ``2L`` random samples (relative to that filter's output), for the cascade and the modal forms;
* ``f32 layer``: an ES-SSM layer (4 -> 4 channels, random weights, no skip) streamed in float32
  chunks of 64 in ``lds`` mode against its float64 forward, and ``vs FIR``: the same float32 stream
  against the float64 FIR (exact Hankel) layer on the first ``L`` samples, both at budget ``K̄``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

BUDGETS = (1, 2, 4, 8, 16, 24, 32)


def _modal_coefficients(bank, phi: np.ndarray) -> list[np.ndarray]:
    """Plain least squares of each filter on its own poles, modal atoms ``(1 - a) a^t``."""
    t = np.arange(bank.length, dtype=np.float64)[:, None]
    atoms = (1.0 - bank.poles)[None, :] * np.power(bank.poles[None, :], t)
    return [np.linalg.lstsq(atoms[:, :s], phi[:, k], rcond=None)[0] for k, s in enumerate(bank.n_states)]


def _f32_bank_errors(bank, modal: list[np.ndarray], u: np.ndarray) -> tuple[float, float]:
    """Worst per-filter relative error of float32 per-sample recurrences (cascade, modal) vs float64."""
    n = len(u)
    nfft = 1 << (2 * n - 1).bit_length()
    uf = np.fft.rfft(u, nfft)
    k_max = bank.k_max
    s_all = len(bank.poles)
    cm = np.zeros((s_all, k_max))
    for k, c in enumerate(modal):
        cm[: len(c), k] = c
    a_tm, b_tm = bank.realization()
    t = np.arange(n, dtype=np.float64)[:, None]
    kern_modal = ((1.0 - bank.poles)[None, :] * np.power(bank.poles[None, :], t)) @ cm
    kerns = (bank.kernels(n), kern_modal)
    refs = [np.fft.irfft(uf[:, None] * np.fft.rfft(k, nfft, axis=0), nfft, axis=0)[:n] for k in kerns]
    f = np.float32
    a32, b32, c32 = a_tm.astype(f), b_tm.astype(f), bank.readout.astype(f)
    p32, q32, cm32 = bank.poles.astype(f), (1.0 - bank.poles).astype(f), cm.astype(f)
    x, h = np.zeros(s_all, f), np.zeros(s_all, f)
    y_tm, y_modal = np.empty((n, k_max), f), np.empty((n, k_max), f)
    for i, v in enumerate(u.astype(f)):
        x = a32 @ x + b32 * v
        h = p32 * h + q32 * v
        y_tm[i], y_modal[i] = x @ c32, h @ cm32
    errs = [float((np.abs(y - r).max(0) / np.abs(r).max(0)).max()) for y, r in zip((y_tm, y_modal), refs, strict=True)]
    return errs[0], errs[1]


def _layer_errors(length: int, k_max: int, tol: float, seed: int = 0) -> tuple[float, float]:
    import torch

    from edgessm.ssm.essm import ElasticSpectralSSM
    from edgessm.ssm.stream import run_chunked

    torch.manual_seed(seed)
    layer = ElasticSpectralSSM(4, 4, length, k_max, mode="lds", lds_tol=tol).eval()
    with torch.no_grad():
        layer.gate_out.weight.normal_()
        layer.gate_out.bias.normal_()
        layer.D.zero_()
        u = torch.randn(1, 4, 2 * length)
        y32, _ = run_chunked(layer, u, [64] * (2 * length // 64))
        ref = layer.double()(u.double())
        layer.mode = "fir"
        fir = layer(u[..., :length].double())
    err = lambda a, b: float((a.double() - b).abs().max() / b.abs().max())  # noqa: E731
    return err(y32, ref), err(y32[..., :length], fir)


def report(length: int, k_max: int, tols: list[float], bank_check: bool = True) -> list[dict]:
    from edgessm.ssm.distill import distill_hankel
    from edgessm.ssm.hankel import hankel_basis

    t0 = time.perf_counter()
    basis = hankel_basis(length, k_max)
    basis_s = time.perf_counter() - t0
    rows = []
    rng = np.random.default_rng(0)
    u = rng.standard_normal(2 * length)
    for tol in tols:
        t0 = time.perf_counter()
        bank = distill_hankel(length, k_max, tol)
        fit_s = time.perf_counter() - t0
        modal = _modal_coefficients(bank, basis.phi)
        f32_tm, f32_modal = _f32_bank_errors(bank, modal, u) if bank_check else (float("nan"),) * 2
        layer_f32, layer_fir = _layer_errors(length, k_max, tol)
        rows.append({
            "L": length, "k_max": k_max, "tol": tol, "h": len(bank.poles),
            "states": {k: bank.states(k) for k in BUDGETS if k <= k_max},
            "fit_error": float(bank.error.max()), "max_abs_C": float(np.abs(bank.readout).max()),
            "max_abs_C_modal_ls": float(max(np.abs(c).max() for c in modal)),
            "max_energy": float(bank.energy().max()), "max_tail_ratio": float(bank.tail_ratio().max()),
            "f32_bank_error": f32_tm, "f32_bank_error_modal": f32_modal,
            "f32_layer_error": layer_f32, "layer_error_vs_fir": layer_fir,
            "basis_seconds": basis_s, "fit_seconds": fit_s,
        })  # fmt: skip
    return rows


def _print(rows: list[dict]) -> None:
    r0 = rows[0]
    print(f"\nL={r0['L']}  K̄={r0['k_max']}  (basis {r0['basis_seconds']:.1f} s); states per budget S_K:")
    print(f"  {'tol':>6} {'h':>4}  " + " ".join(f"{f'K={k}':>5}" for k in r0["states"]))
    for r in rows:
        print(f"  {r['tol']:>6.0e} {r['h']:>4}  " + " ".join(f"{s:>5}" for s in r["states"].values()))
    print(f"  {'tol':>6} {'fit':>8} {'|C|':>8} {'|C| modal':>10} {'f32 bank':>9} {'(modal)':>9} "
          f"{'f32 layer':>10} {'vs FIR':>9} {'tail':>8} {'fit s':>6}")  # fmt: skip
    for r in rows:
        print(f"  {r['tol']:>6.0e} {r['fit_error']:>8.1e} {r['max_abs_C']:>8.3g} {r['max_abs_C_modal_ls']:>10.2g} "
              f"{r['f32_bank_error']:>9.1e} {r['f32_bank_error_modal']:>9.1e} {r['f32_layer_error']:>10.1e} "
              f"{r['layer_error_vs_fir']:>9.1e} {r['max_tail_ratio']:>8.3g} {r['fit_seconds']:>6.1f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgessm.bench.distill", description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--kmax", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--tols", type=float, nargs="+", default=[3e-3, 1e-3, 3e-4, 1e-4])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of tables")
    args = parser.parse_args(argv)
    all_rows = []
    for length in args.lengths:
        for k_max in args.kmax:
            rows = report(length, min(k_max, length), args.tols)
            all_rows.extend(rows)
            if not args.json:
                _print(rows)
    if args.json:
        print(json.dumps(all_rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
