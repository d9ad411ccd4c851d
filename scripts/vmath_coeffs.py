#!/usr/bin/python3
"""Fits the polynomial coefficients of vm/kernels/vmath.hpp (weighted minimax, Remez exchange in
mpmath) and prints them as C++ hex-float initialisers. Needs mpmath (Debian: python3-mpmath).

Each approximation is g(t) ~ sum c_i * t^(p0 + i*step) on [a, b], minimising max |w(t) (g - p)|,
where w turns the error of the fitted piece into the relative error of the final function.
Usage: /usr/bin/python3 scripts/vmath_coeffs.py [name ...]   (no names: all)
"""
import sys
from mpmath import mp, mpf, exp, log, sin, cos, tanh, erf, erfc, atanh, matrix, lu_solve, sqrt, pi

mp.dps = 80


def remez(g, w, a, b, n, p0=0, step=1, iters=30, grid=3000):
    """n coefficients; returns (coeffs, max weighted error)."""
    a, b = mpf(a), mpf(b)
    powers = [p0 + i * step for i in range(n)]

    def poly(c, t):
        return sum(ci * t ** p for ci, p in zip(c, powers))

    def err(c, t):
        return w(t) * (g(t) - poly(c, t))

    m = n + 1  # reference points: n coefficients + the levelled error
    ref = [(a + b) / 2 - (b - a) / 2 * cos(pi * i / (m - 1)) for i in range(m)]
    ref = [t if abs(t) > (b - a) * 1e-9 else (b - a) * 1e-3 for t in ref]  # weights may vanish at 0
    pts = [a + (b - a) * (1 - cos(pi * i / (grid - 1))) / 2 for i in range(grid)]
    best = None
    for _ in range(iters):
        A = matrix(m, m)
        rhs = matrix(m, 1)
        for i, t in enumerate(ref):
            for j, p in enumerate(powers):
                A[i, j] = t ** p
            A[i, n] = (-1) ** i / w(t)
            rhs[i] = g(t)
        sol = lu_solve(A, rhs)
        c = [sol[j] for j in range(n)]
        e = [err(c, t) for t in pts]
        # local extrema of the error, alternating in sign
        ext = []
        for i in range(grid):
            l = e[i - 1] if i > 0 else None
            r = e[i + 1] if i < grid - 1 else None
            v = e[i]
            if (l is None or abs(v) >= abs(l)) and (r is None or abs(v) >= abs(r)):
                ext.append(i)
        alt = []
        for i in ext:
            if alt and (e[i] > 0) == (e[alt[-1]] > 0):
                if abs(e[i]) > abs(e[alt[-1]]):
                    alt[-1] = i
            else:
                alt.append(i)
        while len(alt) > m:  # drop the smaller end
            if abs(e[alt[0]]) < abs(e[alt[-1]]):
                alt.pop(0)
            else:
                alt.pop()
        maxerr = max(abs(v) for v in e)
        if best is None or maxerr < best[1]:
            best = (c, maxerr)
        if len(alt) < m:
            break
        ref = [pts[i] for i in alt]
    return best


LN2 = log(2)
E = mpf(10) ** -6  # odd fits start just above 0, where the relative error vanishes anyway
# name: (g, w, a, b, n, p0, step): g(t) ~ sum c_i t^(p0 + i step), error weighted by w
FITS = {
    # exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2
    'exp_f': (lambda r: exp(r) - 1 - r, lambda r: 1 / exp(r), -0.35, 0.35, 5, 2, 1),
    'exp_d': (lambda r: exp(r) - 1 - r, lambda r: 1 / exp(r), -0.35, 0.35, 10, 2, 1),
    # expm1(r) = r + r^2 P(r), relative to expm1(r)
    'expm1_f': (lambda r: exp(r) - 1 - r, lambda r: 1 / abs(exp(r) - 1), -0.35, 0.35, 6, 2, 1),
    'expm1_d': (lambda r: exp(r) - 1 - r, lambda r: 1 / abs(exp(r) - 1), -0.35, 0.35, 11, 2, 1),
    # 2^r = 1 + r Q(r), |r| <= 1/2
    'exp2_f': (lambda r: 2**r - 1, lambda r: 1 / 2**r, -0.5, 0.5, 6, 1, 1),
    'exp2_d': (lambda r: 2**r - 1, lambda r: 1 / 2**r, -0.5, 0.5, 12, 1, 1),
    # log(1+f) = f - f^2/2 + s (f^2/2 + R), s = f / (2 + f), R = 2 atanh(s)/s - 2 = z T(z) with
    # z = s^2 <= 0.0295, fitted in s (even powers >= 2); the error of s R relative to log(1+f) ~ 2s
    # is the R error / 2
    'log_f': (lambda s: 2 * atanh(s) / s - 2, lambda s: mpf(1) / 2, E, 0.1716, 3, 2, 2),
    'log_d': (lambda s: 2 * atanh(s) / s - 2, lambda s: mpf(1) / 2, E, 0.1716, 7, 2, 2),
    # sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2) (float: evaluated in double)
    'sin_f': (lambda r: sin(r) - r, lambda r: 1 / sin(r), E, 0.85, 5, 3, 2),
    'cos_f': (lambda r: cos(r) - 1 + r * r / 2, lambda r: 1 / cos(r), 0, 0.85, 5, 4, 2),
    'sin_d': (lambda r: sin(r) - r, lambda r: 1 / sin(r), E, 0.7875, 7, 3, 2),
    'cos_d': (lambda r: cos(r) - 1 + r * r / 2, lambda r: 1 / cos(r), 0, 0.7875, 7, 4, 2),
    # double tanh(x) = x + x^3 P(x^2), |x| < 0.5493 (tanh(x) < 1/2); float tanh: scripts/tanh_coeffs.py
    'tanh_d': (lambda x: tanh(x) - x, lambda x: 1 / tanh(x), E, 0.5494, 11, 3, 2),
    # erf(x) = x + x P(x^2), |x| < 1
    'erf_f': (lambda x: erf(x) - x, lambda x: 1 / erf(x), E, 1, 7, 1, 2),
    'erf_d': (lambda x: erf(x) - x, lambda x: 1 / erf(x), E, 1, 14, 1, 2),
}


def erfc_scaled(x):
    return erfc(x) * exp(x * x)


# erfc(x) = exp(-x^2) R(x) on pieces, R a polynomial in t = x - mid
def erfc_fit(lo, hi, n):
    mid = (mpf(lo) + mpf(hi)) / 2
    return (lambda t: erfc_scaled(t + mid), lambda t: 1 / erfc_scaled(t + mid), lo - mid, hi - mid, n, 0, 1), mid


def trim(h):
    m, e = h.split('p')
    return (m.rstrip('0').rstrip('.') if '.' in m else m) + 'p' + e


def fmt(v, dbl):
    if dbl:
        return trim(float(v).hex())
    import struct
    f = struct.unpack('f', struct.pack('f', float(v)))[0]
    return trim(f.hex()) + 'f'


def show(name, spec, mid=None):
    g, w, a, b, n, p0, step = spec
    c, e = remez(g, w, a, b, n, p0, step)
    dbl = name.endswith('_d') or name in ('sin_f', 'cos_f')  # float sin/cos are evaluated in double
    bits = -log(e, 2)
    extra = f' (t = x - {float(mid)})' if mid is not None else ''
    print(f'// {name}: {n} coefficients on [{float(a)}, {float(b)}]{extra}, weighted error 2^-{float(bits):.1f}')
    print('{' + ', '.join(fmt(v, dbl) for v in c) + '}')


if __name__ == '__main__':
    want = sys.argv[1:]
    for k, spec in FITS.items():
        if not want or k in want:
            show(k, spec)
    pieces = {'erfc_f': ([(1, 2.2), (2.2, 4)], 8), 'erfc_d': ([(1, 1.75), (1.75, 2.75), (2.75, 4), (4, 6)], 16)}
    for k, (ivs, n) in pieces.items():
        if not want or k in want:
            for lo, hi in ivs:
                spec, mid = erfc_fit(lo, hi, n)
                show(k, spec, mid)
