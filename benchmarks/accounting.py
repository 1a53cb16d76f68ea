"""Benchmark: DP-SGD epsilon for a grid of noise multipliers, recon_jax's jitted RDP path vs dp_accounting.

Both sides use the same RDP orders, the same (q, steps, delta) and float64; dp_accounting is run as users run it,
one RdpAccountant per noise multiplier in a Python loop. Two comparisons:

* ``accounting_vs_dp_accounting``: the integer orders of dp_accounting's default grid (2, ..., 63, 128, 256, 512,
  1024), where both compute the exact RDP: the answers must agree to 1e-6 relative.
* ``accounting_vs_dp_accounting_full_grid``: the whole default grid (adds 1.1, ..., 10.9). At fractional orders
  ours is tighter (dp_accounting sums the absolute values of the series), so ours may only be smaller.

Each BENCH line reports seconds per grid (ours, baseline) and the speed ratio.

* ``vmf_pld_vs_rdp``: the VMF mechanism at Biswas et al.'s setting (p = 13,700, q = 128/60000, delta = 1/60000)
  composed over the steps of 3 epochs, for a few kappas: accounting time of the pessimistic PLD route
  (``vmf_epsilon(..., approach="pld")``, ours) against approach 2 (jitted RDP route, baseline). The PLD is the
  slower one (ratio < 1); the line also prints how much smaller its epsilons are.

* ``tradeoff_vs_riskcal``: the trade-off curve ``f(alpha)`` of DP-SGD (``pld_tradeoff``) against riskcal's
  ``get_beta_for_dpsgd`` at the same PLD discretisation and the same alphas; both build the same "connect the dots"
  PLD with dp_accounting, ours then reads the supremum straight off the discretised privacy profile. Ours must
  never be above riskcal's (it is a lower bound on the true curve) and is reported with the largest gap.

* ``calibrate_pld_vs_bisection``: ``calibrate_sigma(..., accountant="pld")`` (ours: the safeguarded secant search
  of ``recon_jax.accounting._search``) against a plain log-bisection written here (baseline: the search this
  library used before, the same start at the RDP sigma, the same factor-2 bracket walk, halved until its ends are
  within ``1 + rtol``) on the same PLD epsilon, at a few target epsilons, after one untimed call of each. Both answers
  must meet the target and lie within a factor ``1 + rtol`` of each other; the line prints the bisection's PLD
  evaluations (tests/accounting/test_dpsgd.py counts the secant's).

    python -m benchmarks.accounting [--num_sigmas 1000] [--vmf_kappas 100,200,300] [--calibrate_eps 1,3,8]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from benchmarks.common import bench_line

from recon_jax.accounting import dpsgd_epsilon, vmf_epsilon


def dp_accounting_epsilons(sigmas, q, steps, delta, orders):
    import dp_accounting

    out = []
    for s in sigmas:
        acc = dp_accounting.rdp.RdpAccountant(orders=orders)
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(float(s))), steps))
        out.append(acc.get_epsilon(delta))
    return np.asarray(out)


def _compare(name, sigmas, args, orders):
    def ours():
        return np.asarray(jax.block_until_ready(dpsgd_epsilon(sigmas, args.q, args.steps, args.delta, orders=orders)))

    ours()  # compile
    t_ours = min(_timed(ours) for _ in range(args.repeats))
    eps_ours = ours()
    t0 = time.perf_counter()
    eps_ref = dp_accounting_epsilons(sigmas, args.q, args.steps, args.delta, orders)
    t_ref = time.perf_counter() - t0
    rel = (eps_ours - eps_ref) / eps_ref
    out = {"ours_s": t_ours, "baseline_s": t_ref, "max_abs_rel_diff": float(np.max(np.abs(rel))),
           "max_rel_ours_above": float(np.max(rel))}
    print(f"[{name}] {orders.size} orders; ours {t_ours * 1e3:.1f} ms per grid (jitted, best of {args.repeats}); "
          f"dp_accounting loop {t_ref:.2f} s; max |relative difference| {out['max_abs_rel_diff']:.3g}, "
          f"max (ours - theirs)/theirs {out['max_rel_ours_above']:.3g}")
    bench_line(name, t_ours, t_ref, "s", ratio=t_ref / t_ours)
    return out


def _vmf_pld_vs_rdp(args) -> dict:
    kappas = np.asarray([float(k) for k in args.vmf_kappas.split(",")], np.float64)
    q, delta, dim = 128 / 60000, 1 / 60000, 13700
    steps = int(np.ceil(3 / q))

    def rdp():
        return np.asarray(jax.block_until_ready(vmf_epsilon(kappas, dim, q, steps, delta, approach=2)))

    rdp()  # compile
    t_rdp = min(_timed(rdp) for _ in range(args.repeats))
    e_rdp = rdp()
    # The PLD route caches one-step PLDs per kappa, so only its first call is timed (construction + composition).
    t0 = time.perf_counter()
    e_pld = np.asarray(vmf_epsilon(kappas, dim, q, steps, delta, approach="pld",
                                   value_discretization_interval=args.vmf_discretization))
    t_pld = time.perf_counter() - t0
    print(f"[vmf_pld_vs_rdp] p={dim}, q=128/60000, {steps} steps, delta=1/60000, PLD grid "
          f"{args.vmf_discretization:g}; approach 2 {t_rdp * 1e3:.1f} ms (jitted, best of {args.repeats}), "
          f"PLD {t_pld:.2f} s")
    for k, a, b in zip(kappas, e_rdp, e_pld):
        print(f"  kappa={k:g}: eps approach 2 {a:.4g}, PLD {b:.4g} (approach 2 / PLD = {a / b:.3g})")
    bench_line("vmf_pld_vs_rdp", t_pld, t_rdp, "s", ratio=t_rdp / t_pld)
    return {"pld_s": t_pld, "rdp_s": t_rdp, "eps_rdp": e_rdp.tolist(), "eps_pld": e_pld.tolist()}


def tradeoff_vs_riskcal(sigma, q, steps, grid, repeats) -> dict:
    import warnings

    from recon_jax.accounting import pld_tradeoff

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from riskcal.dpsgd import get_beta_for_dpsgd
    alphas = np.concatenate([np.geomspace(1e-6, 1e-2, 30, endpoint=False), np.linspace(1e-2, 1.0, 101)])
    t_ours = t_ref = float("inf")
    for _ in range(repeats):  # interleaved, best of each
        t0 = time.perf_counter()
        ours = pld_tradeoff(sigma, q, steps, alphas, value_discretization_interval=grid)
        t_ours = min(t_ours, time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = np.asarray(get_beta_for_dpsgd(sigma, q, steps, alphas, grid_step=grid))
        t_ref = min(t_ref, time.perf_counter() - t0)
    out = {"ours_s": t_ours, "baseline_s": t_ref, "max_ours_above": float(np.max(ours - ref)),
           "max_gap": float(np.max(ref - ours)), "monotone": bool(np.all(np.diff(ours) <= 0))}
    print(f"[tradeoff] sigma={sigma}, q={q:.5g}, steps={steps}, grid={grid:g}, {alphas.size} alphas: ours {t_ours:.3f} s, "
          f"riskcal {t_ref:.3f} s; max (ours - riskcal) {out['max_ours_above']:.2e} (must be <= 0), "
          f"max (riskcal - ours) {out['max_gap']:.2e}, ours non-increasing: {out['monotone']}")
    bench_line("tradeoff_vs_riskcal", t_ours, t_ref, "s", ratio=t_ref / t_ours)
    return out


def _bisection_calibration(eps, q, steps, delta, grid, rtol, counter) -> float:
    """The baseline: log-bisection on dpsgd_epsilon(..., "pld") from the RDP sigma (as calibrate_sigma starts)."""
    from recon_jax.accounting import calibrate_sigma

    def ok(s):
        counter.append(s)
        return float(dpsgd_epsilon(s, q, steps, delta, "pld", value_discretization_interval=grid)) <= eps

    hi = float(calibrate_sigma(eps, q, steps, delta))
    while not ok(hi):
        hi *= 2.0
    lo = hi / 2.0
    while ok(lo):
        lo, hi = lo / 2.0, lo
    while hi / lo > 1.0 + rtol:
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def calibrate_pld_vs_bisection(targets, q, steps, delta, grid, rtol) -> dict:
    from recon_jax.accounting import calibrate_sigma

    # Warm-up, untimed, at another target: compiles the jitted RDP calibration both sides start from and the PLD
    # route's array code (about 9 s of the first call on a 2-core EPYC).
    calibrate_sigma(1.37 * targets[0], q, steps, delta, "pld", value_discretization_interval=grid, rtol=rtol)
    _bisection_calibration(1.37 * targets[0], q, steps, delta, grid, rtol, [])
    t_ours = t_ref = 0.0
    rows = []
    for eps in targets:
        t0 = time.perf_counter()
        ours = float(calibrate_sigma(eps, q, steps, delta, "pld", value_discretization_interval=grid, rtol=rtol))
        t_ours += time.perf_counter() - t0
        probes: list[float] = []
        t0 = time.perf_counter()
        ref = _bisection_calibration(eps, q, steps, delta, grid, rtol, probes)
        t_ref += time.perf_counter() - t0
        met = float(dpsgd_epsilon(ours, q, steps, delta, "pld", value_discretization_interval=grid)) <= eps
        rows.append({"eps": eps, "sigma": ours, "sigma_bisection": ref, "bisection_evaluations": len(probes),
                     "meets_target": met, "within_rtol": max(ours, ref) / min(ours, ref) <= 1.0 + rtol})
        print(f"  eps={eps:g}: sigma {ours:.6g} (secant) vs {ref:.6g} (bisection, {len(probes)} PLD evaluations); "
              f"meets the target: {met}; within 1 + rtol of each other: {rows[-1]['within_rtol']}")
    print(f"[calibrate_pld] q={q:.5g}, steps={steps}, delta={delta:g}, grid={grid:g}, rtol={rtol:g}, "
          f"{len(targets)} targets: secant {t_ours:.2f} s, bisection {t_ref:.2f} s")
    bench_line("calibrate_pld_vs_bisection", t_ours, t_ref, "s", ratio=t_ref / t_ours)
    return {"ours_s": t_ours, "baseline_s": t_ref, "rows": rows}


def _main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_sigmas", type=int, default=1000)
    parser.add_argument("--q", type=float, default=256 / 60000)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vmf_kappas", default="100,200,300")
    parser.add_argument("--vmf_discretization", type=float, default=1e-3)
    parser.add_argument("--skip_dpsgd", action="store_true", help="run only the VMF comparison")
    parser.add_argument("--tradeoff_sigma", type=float, default=1.0)
    parser.add_argument("--tradeoff_grid", type=float, default=1e-3, help="PLD discretisation of both sides")
    parser.add_argument("--calibrate_eps", default="1,3,8", help="target epsilons of calibrate_pld_vs_bisection")
    parser.add_argument("--calibrate_steps", type=int, default=1000)
    parser.add_argument("--calibrate_q", type=float, default=0.01)
    parser.add_argument("--calibrate_grid", type=float, default=1e-3, help="PLD discretisation of both searches")
    parser.add_argument("--calibrate_rtol", type=float, default=1e-4)
    args = parser.parse_args([] if argv is None else argv)
    if args.skip_dpsgd:
        return {"vmf": _vmf_pld_vs_rdp(args)}

    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    full = np.asarray(DEFAULT_RDP_ORDERS, np.float64)
    integer = full[full == np.round(full)]
    sigmas = np.linspace(0.5, 5.0, args.num_sigmas)
    print(f"grid: {args.num_sigmas} noise multipliers in [0.5, 5], q={args.q:.5g}, steps={args.steps}, "
          f"delta={args.delta:g}; timings are wall-clock on a shared machine and noisy; both sides ran in this process")
    # Integer orders of dp_accounting's default grid: both sides compute the same exact quantity, so the answers
    # must agree to 1e-6 relative.
    res_int = _compare("accounting_vs_dp_accounting", sigmas, args, integer)
    print(f"agreement to 1e-6 relative at integer orders: {res_int['max_abs_rel_diff'] <= 1e-6}")
    # Full default grid: at fractional orders ours is tighter (dp_accounting sums absolute values of the series),
    # so ours may only be smaller.
    res_full = _compare("accounting_vs_dp_accounting_full_grid", sigmas, args, full)
    print(f"full grid: ours never above dp_accounting (to 1e-9): {res_full['max_rel_ours_above'] <= 1e-9}")
    res_tradeoff = tradeoff_vs_riskcal(args.tradeoff_sigma, args.q, args.steps, args.tradeoff_grid, args.repeats)
    res_calibrate = calibrate_pld_vs_bisection([float(e) for e in args.calibrate_eps.split(",")], args.calibrate_q,
                                               args.calibrate_steps, args.delta, args.calibrate_grid,
                                               args.calibrate_rtol)
    return {"integer_orders": res_int, "full_grid": res_full, "tradeoff": res_tradeoff, "vmf": _vmf_pld_vs_rdp(args),
            "calibrate": res_calibrate}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    """Runs the comparisons in float64 (both sides), without changing the calling process's precision."""
    with jax.enable_x64(True):
        return _main(argv)


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
