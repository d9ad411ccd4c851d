#!/usr/bin/python3
"""Fits the coefficients of float tanh in vm/kernels/vmath.hpp (weighted minimax rational
approximations, a linearised Remez exchange in mpmath) and prints them as C++ hex floats, with the
weighted error before and after rounding the coefficients to float. Needs mpmath.

  small: tanh(x) = x + x u N(u) / M(u), u = x^2, x in [0, 1], relative to tanh(x)
  exp:   tanh(h) = h / E(h^2), |h| <= ln2/4 (+ margin), as the error it gives ln(e^-2h)

Each fit is N(t) / D(t) ~ f(t) with D = 1 + d1 t + ..., minimising max |w(t) (N/D - f(t))|.
The coefficients are rounded to float one at a time, lowest power first, the others refitted
after each (so that the rounding of the early ones is absorbed by the later ones).
Usage: /usr/bin/python3 scripts/tanh_coeffs.py   (about a minute)
"""
import struct
from mpmath import mp, mpf, matrix, lu_solve, cos, pi, log, sqrt, tanh

mp.dps = 50


def hex_float(v):  # a C++ float literal
    m, e = float(v).hex().split('p')
    return m.rstrip('0').rstrip('.') + 'p' + e + 'f'


def to_float(v):
    return mpf(struct.unpack('f', struct.pack('f', float(v)))[0])


def rational(c, t, npow, dpow):
    n = sum(c[('n', i)] * t**i for i in npow)
    return n / (1 + sum(c[('d', j)] * t**j for j in dpow))


def fit(f, w, a, b, npow, dpow, fixed, iters=40, grid=2000):
    """Returns ({('n'|'d', power): value}, max weighted error). Levelled error equations at the
    reference points, N(t) - f D(t) = +-E D_prev(t) / w(t), linear in the unknowns with D taken
    from the previous pass; the new references are the largest error of each run of one sign."""
    a, b = mpf(a), mpf(b)
    free = [k for k in [('n', i) for i in npow] + [('d', j) for j in dpow] if k not in fixed]
    m = len(free) + 1
    ref = [(a + b) / 2 - (b - a) / 2 * cos(pi * (i + mpf(1) / 2) / m) for i in range(m)]
    pts = [(a + b) / 2 - (b - a) / 2 * cos(pi * i / (grid - 1)) for i in range(grid)]
    c, best = dict(fixed), None
    for _ in range(iters):
        A, rhs = matrix(m, m), matrix(m, 1)
        for i, t in enumerate(ref):
            ft = f(t)
            dprev = 1 + sum(c.get(('d', j), 0) * t**j for j in dpow)
            for col, (kind, p) in enumerate(free):
                A[i, col] = t**p if kind == 'n' else -ft * t**p
            A[i, m - 1] = -(-1) ** i * dprev / w(t)
            rhs[i] = ft + sum((ft if kind == 'd' else -1) * v * t**p for (kind, p), v in fixed.items())
        sol = lu_solve(A, rhs)
        c = {**fixed, **{k: sol[col] for col, k in enumerate(free)}}
        err = [w(t) * (rational(c, t, npow, dpow) - f(t)) for t in pts]
        worst = max(abs(e) for e in err)
        if best is None or worst < best[1]:
            best = (c, worst)
        runs = []  # index of the largest |error| of each run of one sign
        for i, e in enumerate(err):
            if runs and (e > 0) == (err[runs[-1]] > 0):
                if abs(e) > abs(err[runs[-1]]):
                    runs[-1] = i
            else:
                runs.append(i)
        while len(runs) > m:  # drop the smaller end
            runs.pop(0 if abs(err[runs[0]]) < abs(err[runs[-1]]) else -1)
        if len(runs) < m:
            break
        ref = [pts[i] for i in runs]
    return best


def fit_float(name, f, w, a, b, npow, dpow, fixed):
    c, e = fit(f, w, a, b, npow, dpow, fixed)
    fixed = dict(fixed)
    for k in sorted(c, key=lambda k: (k[1], k[0])):
        if k not in fixed:
            fixed[k] = to_float(c[k])
            if len(fixed) < len(c):
                c, _ = fit(f, w, a, b, npow, dpow, fixed)
    ts = [mpf(a) + (mpf(b) - mpf(a)) * i / 20000 for i in range(20001)]
    er = max(abs(w(t) * (rational(fixed, t, npow, dpow) - f(t))) for t in ts)
    print(f'// {name}: weighted error 2^{float(log(e, 2)):.1f}, 2^{float(log(er, 2)):.1f} with float coefficients')
    for k in sorted(fixed, key=lambda k: (k[0], k[1])):
        print(f'//   {k[0]}{k[1]} = {hex_float(fixed[k])}')


if __name__ == '__main__':
    tiny = mpf(10) ** -8  # the weights vanish at 0, where the fitted pieces are exact anyway
    # small: g(u) = (tanh(x)/x - 1)/u; an error e in g is an error x u e in tanh
    g = lambda u: (tanh(sqrt(u)) / sqrt(u) - 1) / u
    fit_float('small, N = n0 + n1 u, M = 1 + d1 u + d2 u^2', g, lambda u: u * sqrt(u) / tanh(sqrt(u)),
              tiny, 1, [0, 1], [1, 2], {})
    # exp: e^-2h = (E - h) / (E + h) with h / E ~ tanh(h); an error e in 1/E is an error
    # 2 h e / (1 - tanh(h)^2) in ln(e^-2h). n0 = 1, so that the numerator is h itself.
    hmax = log(2) / 4 * (1 + mpf(2) ** -10)
    fit_float('exp, E = 1 + d1 h^2 + d2 h^4', lambda v: tanh(sqrt(v)) / sqrt(v),
              lambda v: 2 * sqrt(v) / (1 - tanh(sqrt(v)) ** 2), tiny, hmax**2, [0], [1, 2], {('n', 0): mpf(1)})
