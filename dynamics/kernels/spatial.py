"""Compiled spatial-algebra primitives on 6-vectors, exploiting the structure of every operator
(Plancher et al. 2021, Sec. III-B "structured sparsity" and Sec. IV-A: zero-skipping instead of dense 6x6
products).

Conventions as in :mod:`dynamics.spatial`: motion vectors ``(linear, angular)``, force vectors
``(force, torque)``; a placement ``(R, p)`` is the child frame in the parent frame. A spatial
transform is never formed as a 6x6 matrix: ``X y`` is one 3x3 rotation and one cross product;
cross-product operators are re-orderings of the operands. A rigid-body spatial inertia is kept in
compact form: 13 numbers ``(m, h, Io)`` (mass, first moment ``h = m c`` and rotational inertia about
the frame origin, row-major) in a row of a 2-D array, i.e. ``I = [[m 1, -[h]x], [[h]x, Io]]``.

All functions write into ``out`` (never allocate) and read every input before writing, so ``out``
may alias an input. Rotations are (3, 3) arrays, vectors 1-D arrays of length >= 6 (or 3).
"""

from __future__ import annotations

import numpy as np

from .jit import jit, jit_inline


@jit
def mot_to_child(R, p, y, out):
    """``X y``: motion vector from parent to child coordinates, ``(R^T (y_l - p x y_a), R^T y_a)``."""
    l0 = y[0] - (p[1] * y[5] - p[2] * y[4])
    l1 = y[1] - (p[2] * y[3] - p[0] * y[5])
    l2 = y[2] - (p[0] * y[4] - p[1] * y[3])
    a0, a1, a2 = y[3], y[4], y[5]
    out[0] = R[0, 0] * l0 + R[1, 0] * l1 + R[2, 0] * l2
    out[1] = R[0, 1] * l0 + R[1, 1] * l1 + R[2, 1] * l2
    out[2] = R[0, 2] * l0 + R[1, 2] * l1 + R[2, 2] * l2
    out[3] = R[0, 0] * a0 + R[1, 0] * a1 + R[2, 0] * a2
    out[4] = R[0, 1] * a0 + R[1, 1] * a1 + R[2, 1] * a2
    out[5] = R[0, 2] * a0 + R[1, 2] * a1 + R[2, 2] * a2


@jit
def mot_to_parent(R, p, y, out):
    """``X^-1 y`` (adjoint): motion vector from child to parent coordinates, ``(R y_l + p x R y_a, R y_a)``."""
    a0 = R[0, 0] * y[3] + R[0, 1] * y[4] + R[0, 2] * y[5]
    a1 = R[1, 0] * y[3] + R[1, 1] * y[4] + R[1, 2] * y[5]
    a2 = R[2, 0] * y[3] + R[2, 1] * y[4] + R[2, 2] * y[5]
    l0 = R[0, 0] * y[0] + R[0, 1] * y[1] + R[0, 2] * y[2]
    l1 = R[1, 0] * y[0] + R[1, 1] * y[1] + R[1, 2] * y[2]
    l2 = R[2, 0] * y[0] + R[2, 1] * y[1] + R[2, 2] * y[2]
    out[0] = l0 + p[1] * a2 - p[2] * a1
    out[1] = l1 + p[2] * a0 - p[0] * a2
    out[2] = l2 + p[0] * a1 - p[1] * a0
    out[3] = a0
    out[4] = a1
    out[5] = a2


@jit
def force_to_parent(R, p, f, out):
    """``X^T f``: force vector from child to parent coordinates, ``(R f_l, R f_a + p x R f_l)``."""
    l0 = R[0, 0] * f[0] + R[0, 1] * f[1] + R[0, 2] * f[2]
    l1 = R[1, 0] * f[0] + R[1, 1] * f[1] + R[1, 2] * f[2]
    l2 = R[2, 0] * f[0] + R[2, 1] * f[1] + R[2, 2] * f[2]
    a0 = R[0, 0] * f[3] + R[0, 1] * f[4] + R[0, 2] * f[5]
    a1 = R[1, 0] * f[3] + R[1, 1] * f[4] + R[1, 2] * f[5]
    a2 = R[2, 0] * f[3] + R[2, 1] * f[4] + R[2, 2] * f[5]
    out[0] = l0
    out[1] = l1
    out[2] = l2
    out[3] = a0 + p[1] * l2 - p[2] * l1
    out[4] = a1 + p[2] * l0 - p[0] * l2
    out[5] = a2 + p[0] * l1 - p[1] * l0


@jit
def mot_cross(v, m, out):
    """``v x m`` (motion on motion): ``(v_a x m_l + v_l x m_a, v_a x m_a)``."""
    l0 = v[4] * m[2] - v[5] * m[1] + v[1] * m[5] - v[2] * m[4]
    l1 = v[5] * m[0] - v[3] * m[2] + v[2] * m[3] - v[0] * m[5]
    l2 = v[3] * m[1] - v[4] * m[0] + v[0] * m[4] - v[1] * m[3]
    a0 = v[4] * m[5] - v[5] * m[4]
    a1 = v[5] * m[3] - v[3] * m[5]
    a2 = v[3] * m[4] - v[4] * m[3]
    out[0] = l0
    out[1] = l1
    out[2] = l2
    out[3] = a0
    out[4] = a1
    out[5] = a2


@jit
def mot_cross_add(v, m, out):
    """``out += v x m``."""
    l0 = v[4] * m[2] - v[5] * m[1] + v[1] * m[5] - v[2] * m[4]
    l1 = v[5] * m[0] - v[3] * m[2] + v[2] * m[3] - v[0] * m[5]
    l2 = v[3] * m[1] - v[4] * m[0] + v[0] * m[4] - v[1] * m[3]
    a0 = v[4] * m[5] - v[5] * m[4]
    a1 = v[5] * m[3] - v[3] * m[5]
    a2 = v[3] * m[4] - v[4] * m[3]
    out[0] += l0
    out[1] += l1
    out[2] += l2
    out[3] += a0
    out[4] += a1
    out[5] += a2


@jit
def force_cross(v, f, out):
    """``v x* f`` (motion on force): ``(v_a x f_l, v_l x f_l + v_a x f_a)``."""
    l0 = v[4] * f[2] - v[5] * f[1]
    l1 = v[5] * f[0] - v[3] * f[2]
    l2 = v[3] * f[1] - v[4] * f[0]
    a0 = v[1] * f[2] - v[2] * f[1] + v[4] * f[5] - v[5] * f[4]
    a1 = v[2] * f[0] - v[0] * f[2] + v[5] * f[3] - v[3] * f[5]
    a2 = v[0] * f[1] - v[1] * f[0] + v[3] * f[4] - v[4] * f[3]
    out[0] = l0
    out[1] = l1
    out[2] = l2
    out[3] = a0
    out[4] = a1
    out[5] = a2


@jit
def force_cross_add(v, f, out):
    """``out += v x* f``."""
    l0 = v[4] * f[2] - v[5] * f[1]
    l1 = v[5] * f[0] - v[3] * f[2]
    l2 = v[3] * f[1] - v[4] * f[0]
    a0 = v[1] * f[2] - v[2] * f[1] + v[4] * f[5] - v[5] * f[4]
    a1 = v[2] * f[0] - v[0] * f[2] + v[5] * f[3] - v[3] * f[5]
    a2 = v[0] * f[1] - v[1] * f[0] + v[3] * f[4] - v[4] * f[3]
    out[0] += l0
    out[1] += l1
    out[2] += l2
    out[3] += a0
    out[4] += a1
    out[5] += a2


@jit
def inertia_mul(Y, r, y, out):
    """``I y`` for the compact inertia stored in row ``r`` of ``Y`` (``Y[r] = (m, h, Io row-major)``):
    ``(m y_l + y_a x h, h x y_l + Io y_a)``."""
    m = Y[r, 0]
    h0 = Y[r, 1]
    h1 = Y[r, 2]
    h2 = Y[r, 3]
    l0 = m * y[0] + y[4] * h2 - y[5] * h1
    l1 = m * y[1] + y[5] * h0 - y[3] * h2
    l2 = m * y[2] + y[3] * h1 - y[4] * h0
    a0 = h1 * y[2] - h2 * y[1] + Y[r, 4] * y[3] + Y[r, 5] * y[4] + Y[r, 6] * y[5]
    a1 = h2 * y[0] - h0 * y[2] + Y[r, 7] * y[3] + Y[r, 8] * y[4] + Y[r, 9] * y[5]
    a2 = h0 * y[1] - h1 * y[0] + Y[r, 10] * y[3] + Y[r, 11] * y[4] + Y[r, 12] * y[5]
    out[0] = l0
    out[1] = l1
    out[2] = l2
    out[3] = a0
    out[4] = a1
    out[5] = a2


@jit_inline
def inertia_to_parent_add(Y, r, R, p, Yout, ro):
    """``Yout[ro] += X^T I X``: the compact inertia ``Y[r]`` given in a child frame, expressed in the
    parent frame (placement ``(R, p)`` of the child): ``m' = m``, ``h' = m p + R h``,
    ``Io' = R Io R^T - m [p]x^2 - ([p]x [Rh]x + [Rh]x [p]x)`` (parallel-axis theorem)."""
    m = Y[r, 0]
    hr0 = R[0, 0] * Y[r, 1] + R[0, 1] * Y[r, 2] + R[0, 2] * Y[r, 3]
    hr1 = R[1, 0] * Y[r, 1] + R[1, 1] * Y[r, 2] + R[1, 2] * Y[r, 3]
    hr2 = R[2, 0] * Y[r, 1] + R[2, 1] * Y[r, 2] + R[2, 2] * Y[r, 3]
    Yout[ro, 0] += m
    Yout[ro, 1] += m * p[0] + hr0
    Yout[ro, 2] += m * p[1] + hr1
    Yout[ro, 3] += m * p[2] + hr2
    pp = p[0] * p[0] + p[1] * p[1] + p[2] * p[2]
    ph = p[0] * hr0 + p[1] * hr1 + p[2] * hr2
    diag = m * pp + 2.0 * ph
    for a in range(3):
        # row a of R Io
        t0 = R[a, 0] * Y[r, 4] + R[a, 1] * Y[r, 7] + R[a, 2] * Y[r, 10]
        t1 = R[a, 0] * Y[r, 5] + R[a, 1] * Y[r, 8] + R[a, 2] * Y[r, 11]
        t2 = R[a, 0] * Y[r, 6] + R[a, 1] * Y[r, 9] + R[a, 2] * Y[r, 12]
        ha = hr0 if a == 0 else (hr1 if a == 1 else hr2)
        for b in range(3):
            hb = hr0 if b == 0 else (hr1 if b == 1 else hr2)
            # -m [p]^2 = m (|p|^2 1 - p p^T);  -([p][hr] + [hr][p]) = 2 (p.hr) 1 - hr p^T - p hr^T
            val = t0 * R[b, 0] + t1 * R[b, 1] + t2 * R[b, 2] - m * p[a] * p[b] - ha * p[b] - p[a] * hb
            if a == b:
                val += diag
            Yout[ro, 4 + 3 * a + b] += val


@jit
def dense_inertia(Y, r, out):
    """The 6x6 matrix ``[[m 1, -[h]x], [[h]x, Io]]`` of the compact inertia ``Y[r]``."""
    for a in range(6):
        for b in range(6):
            out[a, b] = 0.0
    for k in range(3):
        out[k, k] = Y[r, 0]
        for c in range(3):
            out[3 + k, 3 + c] = Y[r, 4 + 3 * k + c]
    h0 = Y[r, 1]
    h1 = Y[r, 2]
    h2 = Y[r, 3]
    out[3, 1] = -h2
    out[3, 2] = h1
    out[4, 0] = h2
    out[4, 2] = -h0
    out[5, 0] = -h1
    out[5, 1] = h0
    out[0, 4] = h2
    out[0, 5] = -h1
    out[1, 3] = -h2
    out[1, 5] = h0
    out[2, 3] = h1
    out[2, 4] = -h0


@jit
def spd_inverse(A, n, chol, out):
    """Inverse of the leading ``n x n`` block of a symmetric positive-definite ``A`` (n <= 6) by
    Cholesky factorisation, written to ``out[:n, :n]`` (the joint-space articulated inertia ``D``
    of a ball or free joint, RBDA Table 7.1). ``chol`` is (6, 6) scratch. A matrix that is not
    positive definite gives NaN (numpy's inverse of a singular matrix would raise or give inf)."""
    if n == 1:
        out[0, 0] = 1.0 / A[0, 0]
        return
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= chol[j, k] * chol[j, k]
        d = np.sqrt(s) if s > 0.0 else np.nan
        chol[j, j] = d
        for i in range(j + 1, n):
            t = A[i, j]
            for k in range(j):
                t -= chol[i, k] * chol[j, k]
            chol[i, j] = t / d
    for c in range(n):           # column c of A^-1: solve L y = e_c, then L^T x = y
        for i in range(n):
            t = 1.0 if i == c else 0.0
            for k in range(i):
                t -= chol[i, k] * out[k, c]
            out[i, c] = t / chol[i, i]
        for i in range(n - 1, -1, -1):
            t = out[i, c]
            for k in range(i + 1, n):
                t -= chol[k, i] * out[k, c]
            out[i, c] = t / chol[i, i]
