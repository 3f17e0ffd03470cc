"""Dense checks of hierbench.geometry: spec reference values, geoopt agreement, properties, float32 numerics,
finite gradients at degenerate configurations, autocast behaviour and bad-input errors."""

import math
import os
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from hypothesis.extra.numpy import arrays

from hierbench.geometry import (
    EXP_MAP_MAX_R,
    check_point,
    dist,
    dist0,
    exp_map0,
    exterior_angle,
    geometry_speed_ratios,
    half_aperture,
    log_map0,
    lorentz_inner,
    lorentz_time,
    lorentz_to_poincare,
    pairwise_dist,
    pairwise_inner,
    poincare_to_lorentz,
)

F64 = torch.float64
SEEDS = [0, 1, 2]


def P(*v, dtype=F64):
    return torch.tensor(v, dtype=dtype)


def meru_dist(x, y, c):
    "MERU's formula acosh(-c<x,y>_L)/sqrt(c) with its 1+1e-8 clamp: the reference the tests must beat."
    return torch.acosh((-c * lorentz_inner(x, y, c)).clamp(min=1 + 1e-8)) / math.sqrt(c)


def meru_angle(x, y, c):
    "MERU's oxy_angle: acos of the clamped cosine formula."
    xt, yt = lorentz_time(x, c), lorentz_time(y, c)
    l = c * ((x * y).sum(-1) - xt * yt)
    cos = (yt + l * xt) / (x.norm(dim=-1) * torch.sqrt((l * l - 1).clamp(min=1e-8)) + 1e-8)
    return torch.acos(cos.clamp(-1 + 1e-8, 1 - 1e-8))


def textbook_angle(x, y, c):
    "The spec's cosine formula without MERU's epsilons (float64, only where it is well conditioned)."
    xt, yt = lorentz_time(x, c), lorentz_time(y, c)
    l = c * ((x * y).sum(-1) - xt * yt)
    return torch.acos((yt + l * xt) / (x.norm(dim=-1) * torch.sqrt(l * l - 1)))


# ----------------------------------------------------------------------------------------------- reference values
E1, E2 = P(1, 0), P(0, 1)
REFERENCE = [
    ("d(O,(1,0))", lambda: dist0(E1, 1.0), 0.881374),
    ("d(O,(1,0)) via dist", lambda: dist(P(0, 0), E1, 1.0), 0.881374),
    ("d((1,0),(0,1))", lambda: dist(E1, E2, 1.0), 1.316958),
    ("d(O,(3,4))", lambda: dist(P(0, 0), P(3, 4), 1.0), 2.312438),
    ("exp_map0 c=1", lambda: exp_map0(E1, 1.0), P(1.175201, 0)),
    ("log_map0 c=1", lambda: log_map0(exp_map0(E1, 1.0), 1.0), E1),
    ("exp_map0 c=2", lambda: exp_map0(E1, 2.0), P(1.368299, 0)),
    ("exp_map0 c=0.5", lambda: exp_map0(E1, 0.5), P(1.085442, 0)),
    ("d(exp e1, exp e2) c=1", lambda: dist(exp_map0(E1, 1.0), exp_map0(E2, 1.0), 1.0), 1.513374),
    ("d(exp e1, exp e2) c=2", lambda: dist(exp_map0(E1, 2.0), exp_map0(E2, 2.0), 2.0), 1.583095),
    ("d(exp e1, exp e2) c=0.5", lambda: dist(exp_map0(E1, 0.5), exp_map0(E2, 0.5), 0.5), 1.468215),
    (
        "pairwise d(exp e1, exp e2) c=2",
        lambda: pairwise_dist(exp_map0(E1, 2.0)[None], exp_map0(E2, 2.0)[None], 2.0)[0, 0],
        1.583095,
    ),
    ("omega((1,0))", lambda: half_aperture(E1, 1.0), 0.201358),
    ("omega(exp e1) c=1", lambda: half_aperture(exp_map0(E1, 1.0), 1.0), 0.171016),
    ("omega(exp e1) c=2", lambda: half_aperture(exp_map0(E1, 2.0), 2.0), 0.103541),
    ("omega(exp e1) c=0.5", lambda: half_aperture(exp_map0(E1, 0.5), 0.5), 0.263621),
    ("phi((1,0),(0,1))", lambda: exterior_angle(E1, E2, 1.0), 2.526113),
    ("phi((1,0),(1,1))", lambda: exterior_angle(E1, P(1, 1), 1.0), 1.878536),
    ("phi((1,0),(2,0))", lambda: exterior_angle(E1, P(2, 0), 1.0), 0.0),
    ("phi((2,0),(1,0))", lambda: exterior_angle(P(2, 0), E1, 1.0), math.pi),
    ("phi(exp e1, exp e2) c=1", lambda: exterior_angle(exp_map0(E1, 1.0), exp_map0(E2, 1.0), 1.0), 2.566586),
    ("phi(exp e1, exp e2) c=2", lambda: exterior_angle(exp_map0(E1, 2.0), exp_map0(E2, 2.0), 2.0), 2.711199),
    ("phi(exp e1, exp e2) c=0.5", lambda: exterior_angle(exp_map0(E1, 0.5), exp_map0(E2, 0.5), 0.5), 2.470964),
    ("phi(t,v)", lambda: exterior_angle(P(0.5, 0), P(2, 0.5), 1.0), 0.429931),
    ("omega(t)", lambda: half_aperture(P(0.5, 0), 1.0), 0.411517),
    (
        "MERU entailment loss",
        lambda: (exterior_angle(P(0.5, 0), P(2, 0.5), 1.0) - half_aperture(P(0.5, 0), 1.0)).clamp(min=0),
        0.018414,
    ),
]


@pytest.mark.parametrize("name,fn,expected", REFERENCE, ids=[r[0] for r in REFERENCE])
def test_reference_values(name, fn, expected):
    got = fn()
    torch.testing.assert_close(got, torch.as_tensor(expected, dtype=F64).expand_as(got), atol=1e-6, rtol=0)


def test_aperture_threshold_argent():
    "Norms <= 2K/sqrt(c) saturate at ~pi/2 (ARGENT's illustrative C=0.1, K=0.1: threshold 0.6325)."
    c = 0.1
    thr = 2 * 0.1 / math.sqrt(c)
    assert abs(thr - 0.6325) < 1e-4
    om = half_aperture(torch.tensor([[thr * 0.5, 0], [thr * 0.999, 0], [thr * 1.5, 0]], dtype=F64), c)
    assert abs(om[0] - math.pi / 2) < 2e-4 and abs(om[1] - math.pi / 2) < 0.05
    assert abs(om[2] - math.asin(1 / 1.5)) < 1e-9


# --------------------------------------------------------------------------------------------------- geoopt
def _full(x, c):
    return torch.cat([lorentz_time(x, c, keepdim=True), x], -1)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("c", [0.1, 1.0, 3.0])
def test_agrees_with_geoopt(seed, c):
    geoopt = pytest.importorskip("geoopt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        man = geoopt.Lorentz(k=1 / c)  # geoopt: curvature -1/k, full (time, space) coordinates
    g = torch.Generator().manual_seed(seed)
    x, y = (torch.randn(64, 5, generator=g, dtype=F64) * 1.5 for _ in range(2))
    torch.testing.assert_close(dist(x, y, c), man.dist(_full(x, c), _full(y, c)), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(dist0(x, c), man.dist0(_full(x, c)), rtol=1e-6, atol=1e-7)
    v = torch.randn(64, 5, generator=g, dtype=F64)
    zero = torch.zeros(64, 1, dtype=F64)
    torch.testing.assert_close(exp_map0(v, c), man.expmap0(torch.cat([zero, v], -1))[:, 1:], rtol=1e-6, atol=1e-7)
    lg = man.logmap0(_full(x, c))  # geoopt's time component is 0 only up to ~1e-7 of its own rounding
    torch.testing.assert_close(log_map0(x, c), lg[:, 1:], rtol=1e-6, atol=1e-7)
    assert lg[:, 0].abs().max() < 1e-6
    torch.testing.assert_close(lorentz_inner(x, y, c), man.inner(None, _full(x, c), _full(y, c)), rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------- properties
dims = st.integers(1, 5)
curv = st.floats(0.1, 10.0)


def points(d, lo=-30.0, hi=30.0):
    return arrays(np.float64, (d,), elements=st.floats(lo, hi, allow_nan=False, allow_infinity=False))


@st.composite
def point_pair(draw, n=2):
    d = draw(dims)
    return [torch.from_numpy(draw(points(d))) for _ in range(n)]


# HIERBENCH_HYPOTHESIS_EXAMPLES=2000 for a deeper search than CI's default
PROP = settings(
    max_examples=int(os.environ.get("HIERBENCH_HYPOTHESIS_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROP
@given(point_pair(3), curv)
def test_dist_metric_axioms(pts, c):
    x, y, z = pts
    dxy, dyx = dist(x, y, c), dist(y, x, c)
    assert dxy >= 0
    torch.testing.assert_close(dxy, dyx, rtol=1e-12, atol=1e-12)
    assert dist(x, x, c) == 0
    assert dist(x, z, c) <= dxy + dist(y, z, c) + 1e-9 * (1 + dxy)
    # the stable formula is the textbook one (float64, away from the cancellation regime)
    if dxy > 1e-3:
        torch.testing.assert_close(dxy, meru_dist(x, y, c), rtol=1e-6, atol=0)


@PROP
@given(point_pair(1), curv)
def test_exp_log_round_trip_and_radius(pts, c):
    (v,) = pts
    if math.sqrt(c) * v.norm() > EXP_MAP_MAX_R:  # beyond MERU's overflow cap the map saturates
        v = v * (0.9 * EXP_MAP_MAX_R / (math.sqrt(c) * v.norm()))
    x = exp_map0(v, c)
    torch.testing.assert_close(log_map0(x, c), v, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(dist0(x, c), v.norm(), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(dist(torch.zeros_like(x), x, c), v.norm(), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(log_map0(x, c).norm(), dist0(x, c), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(exp_map0(log_map0(v, c), c), v, rtol=1e-9, atol=1e-12)


@PROP
@given(point_pair(2), curv)
def test_exterior_angle_range_and_formula(pts, c):
    x, y = pts
    phi = exterior_angle(x, y, c)
    assert 0 <= phi <= math.pi
    # agrees with the textbook cosine formula where that one is well conditioned
    if x.norm() > 1e-2 and dist(x, y, c) > 1e-2 and 0.05 < phi < math.pi - 0.05:
        torch.testing.assert_close(phi, textbook_angle(x, y, c), rtol=0, atol=1e-8)


@PROP
@given(point_pair(1), st.floats(1.001, 20.0), st.floats(0.0, 0.999), curv)
def test_exterior_angle_collinear(pts, k_out, k_in, c):
    (x,) = pts
    if x.norm() < 1e-3:
        x = x + 1.0
    assert exterior_angle(x, k_out * x, c) < 1e-6  # child further out on the ray O -> x
    assert exterior_angle(x, k_in * x, c) > math.pi - 1e-6  # child between O and the parent
    assert exterior_angle(x, -k_out * x, c) > math.pi - 1e-6  # child behind the origin


def test_degenerate_angle_conventions():
    x = P(0.3, -0.4, 1.2)
    assert exterior_angle(x, x, 1.0) == 0  # a point lies in its own cone
    assert exterior_angle(torch.zeros(3, dtype=F64), x, 1.0) == pytest.approx(math.pi / 2)  # MERU's value at O
    assert exterior_angle(x, torch.zeros(3, dtype=F64), 1.0) == pytest.approx(math.pi)


def test_cone_boundary_by_construction():
    "Children built by trigonometry at interior angle pi - omega from the parent sit exactly on the cone boundary."
    for c in (0.5, 1.0, 2.0):
        parent = P(0.9, 0.2)
        a, om = math.sqrt(c) * float(dist0(parent, c)), float(half_aperture(parent, c))
        for t in (0.1, 1.0, 3.0):
            cosh_b = math.cosh(a) * math.cosh(t) + math.sinh(a) * math.sinh(t) * math.cos(om)
            b = math.acosh(cosh_b)
            theta = math.acos((math.cosh(a) * cosh_b - math.cosh(t)) / (math.sinh(a) * math.sinh(b)))
            base = math.atan2(0.2, 0.9)
            child = P(math.cos(base + theta), math.sin(base + theta)) * math.sinh(b) / math.sqrt(c)
            assert abs(float(exterior_angle(parent, child, c)) - om) < 1e-9
            assert abs(float(dist(parent, child, c)) - t / math.sqrt(c)) < 1e-9


# ------------------------------------------------------------------------------------------ float32 numerics
def _close_pairs(seed, n=2000, d=32):
    "Pairs at distances spanning 1e-4..10 (log-uniform gaps, norms 1e-2..30)."
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    x = x / x.norm(dim=-1, keepdim=True) * 10 ** (torch.rand(n, 1, generator=g, dtype=F64) * 3.5 - 2)
    step = torch.randn(n, d, generator=g, dtype=F64)
    step = step / step.norm(dim=-1, keepdim=True) * 10 ** (torch.rand(n, 1, generator=g, dtype=F64) * 5 - 4)
    y = exp_map0(log_map0(x, 1.0) + step, 1.0)  # roughly `step` away in hyperbolic distance
    return x.float(), y.float()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("c", [0.1, 1.0, 10.0])
def test_dist_float32_relative_error(seed, c):
    x32, y32 = _close_pairs(seed)
    ref = dist(x32.double(), y32.double(), c)  # float64 maths on the very same float32 points
    keep = (ref >= 1e-4) & (ref <= 10)
    assert keep.sum() > 1000
    rel = ((dist(x32, y32, c).double() - ref).abs() / ref)[keep]
    assert dist(x32, y32, c).dtype == torch.float32
    assert rel.max() < 1e-3, rel.max()
    # the data are hard: MERU's acosh(-c<x,y>) fails the same requirement on them
    naive = ((meru_dist(x32, y32, c).double() - ref).abs() / ref)[keep]
    assert naive.max() > 1e-2


def _near_collinear(seed, n=2000, d=32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    x = x / x.norm(dim=-1, keepdim=True) * 10 ** (torch.rand(n, 1, generator=g, dtype=F64) * 3 - 1.5)
    k = torch.where(torch.rand(n, 1, generator=g, dtype=F64) < 0.5, 1.5, 0.6)  # outward and inward children
    perp = torch.randn(n, d, generator=g, dtype=F64) * 10 ** (torch.rand(n, 1, generator=g, dtype=F64) * 4 - 5)
    return x.float(), (k * x + perp * x.norm(dim=-1, keepdim=True)).float()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("c", [0.1, 1.0, 10.0])
def test_exterior_angle_float32_abs_error(seed, c):
    x32, y32 = _near_collinear(seed)
    ref = exterior_angle(x32.double(), y32.double(), c)
    got = exterior_angle(x32, y32, c)
    assert got.dtype == torch.float32
    assert ((ref < 1e-2) | (ref > math.pi - 1e-2)).float().mean() > 0.2  # many near-collinear pairs
    err = (got.double() - ref).abs()
    assert err.max() < 5e-4, err.max()
    naive = (meru_angle(x32, y32, c).double() - ref).abs()
    assert naive.max() > 1e-3  # the data are hard


@pytest.mark.parametrize("fname,tol", [("dist", 1e-5), ("exterior_angle", 2e-3)])
def test_float32_gradients_match_float64(fname, tol):
    "Not only finite: float32 gradients of close / near-collinear pairs agree with float64 ones."
    fn = {"dist": dist, "exterior_angle": exterior_angle}[fname]
    x32, y32 = (_close_pairs if fname == "dist" else _near_collinear)(0, n=500)
    grads = []
    for dt in (torch.float32, F64):
        x, y = x32.to(dt).clone().requires_grad_(), y32.to(dt).clone().requires_grad_()
        fn(x, y, 1.0).sum().backward()
        grads.append(torch.cat([x.grad, y.grad], -1).double())
    rel = (grads[0] - grads[1]).norm(dim=-1) / grads[1].norm(dim=-1)
    assert rel.max() < tol, rel.max()


def test_pairwise_dist_precision_as_documented():
    x32, y32 = _close_pairs(0, n=300)
    d_rowwise = dist(x32.double(), y32.double(), 1.0)
    d_pair = pairwise_dist(x32, y32, 1.0).diagonal().double()
    bound = torch.sqrt(2 * 1.2e-7 * lorentz_time(x32.double(), 1.0) * lorentz_time(y32.double(), 1.0)) * 4
    assert ((d_pair - d_rowwise).abs() <= bound + 1e-6 * d_rowwise).all()
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(40, 7, generator=g, dtype=F64), torch.randn(30, 7, generator=g, dtype=F64)
    for c in (0.3, torch.tensor(2.0, dtype=F64)):
        torch.testing.assert_close(pairwise_dist(a, b, c), dist(a[:, None], b[None], c), rtol=1e-9, atol=1e-7)
        torch.testing.assert_close(pairwise_inner(a, b, c), lorentz_inner(a[:, None], b[None], c))
    assert pairwise_dist(a.float(), a.float(), 1.0).diagonal().abs().max() < 2e-3  # identical points: ~noise


# ------------------------------------------------------------------------- finite values and gradients
def _degenerate_cases(dt):
    a = torch.tensor([1.0, -2.0, 0.5], dtype=dt)
    b = torch.tensor([0.3, 0.2, -0.1], dtype=dt)
    z = torch.zeros(3, dtype=dt)
    cases = {
        "identical": (a, a.clone()),
        "origin_x": (z, a),
        "origin_y": (a, z),
        "origin_both": (z, z.clone()),
        "collinear_out": (a, 3 * a),
        "collinear_in": (3 * a, a),
        "antipodal": (a, -2 * a),
    }
    for n in (1e-6, 1e-3, 1.0, 1e2, 1e4):
        ua, ub = a / a.norm() * n, b / b.norm() * n
        cases[f"norm{n:g}"] = (ua, ub)
        cases[f"norm{n:g}_same"] = (ua, ua.clone())
        cases[f"norm{n:g}_close"] = (ua, ua * (1 + 1e-5))
        cases[f"norm{n:g}_mixed"] = (ua, b)
    for n in (1e-30, torch.finfo(dt).tiny / 4):  # far below the goals' range, incl. subnormals
        cases[f"tiny{n:g}"] = (a / a.norm() * n, b / b.norm() * n)
        cases[f"tiny{n:g}_vs_a"] = (a / a.norm() * n, a)
    return cases


FUNCS = {
    "dist": lambda x, y, c: dist(x, y, c),
    "exterior_angle": lambda x, y, c: exterior_angle(x, y, c),
    "exterior_angle_swapped": lambda x, y, c: exterior_angle(y, x, c),
    "pairwise_dist": lambda x, y, c: pairwise_dist(torch.stack([x, y]), torch.stack([y, x]), c),
    "pairwise_inner": lambda x, y, c: pairwise_inner(x[None], y[None], c),
    "lorentz_inner": lambda x, y, c: lorentz_inner(x, y, c),
    "dist0": lambda x, y, c: dist0(torch.stack([x, y]), c),
    "exp_map0": lambda x, y, c: exp_map0(torch.stack([x, y]), c),
    "log_map0": lambda x, y, c: log_map0(torch.stack([x, y]), c),
    "half_aperture": lambda x, y, c: half_aperture(torch.stack([x, y]), c),
    "entailment_loss": lambda x, y, c: (exterior_angle(x, y, c) - half_aperture(x, c)).clamp(min=0),
    "poincare": lambda x, y, c: lorentz_to_poincare(torch.stack([x, y]), c),
}


@pytest.mark.parametrize("dt", [torch.float32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("fname", list(FUNCS))
def test_finite_values_and_gradients(fname, dt):
    fn, failures = FUNCS[fname], []
    for case, (x0, y0) in _degenerate_cases(dt).items():
        for c0 in (0.1, 1.0, 10.0):
            x, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
            c = torch.tensor(c0, dtype=dt, requires_grad=True)
            out = fn(x, y, c)
            out.sum().backward()
            grads = [t.grad for t in (x, y, c) if t.grad is not None]
            if not (torch.isfinite(out).all() and all(torch.isfinite(gr).all() for gr in grads)):
                failures.append((case, c0))
    assert not failures, failures


def test_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=g, dtype=F64, requires_grad=True)
    y = torch.randn(4, 3, generator=g, dtype=F64, requires_grad=True)
    c = torch.tensor(0.7, dtype=F64, requires_grad=True)
    for fn in (dist, exterior_angle, lorentz_inner):
        assert torch.autograd.gradcheck(lambda a, b, k: fn(a, b, k), (x, y, c))
    for fn in (exp_map0, log_map0, dist0, half_aperture, lorentz_to_poincare):
        assert torch.autograd.gradcheck(lambda a, k: fn(a, k), (x, c))
    assert torch.autograd.gradcheck(lambda a, b, k: pairwise_dist(a, b, k), (x, y, c))
    p = (0.3 * torch.randn(4, 3, generator=g, dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, k: poincare_to_lorentz(a, k), (p, c))


def test_gradient_of_close_pair_is_a_unit_direction():
    "d(x, y) behaves like a norm near x = y: its gradient has Riemannian length 1 and points along x - y (float32)."
    x = torch.tensor([0.4, -0.2, 0.1])
    y = (x + torch.tensor([1e-4, 0.0, 0.0])).requires_grad_()
    dist(x, y, 1.0).backward()
    assert torch.isfinite(y.grad).all() and y.grad[0] > 0 and y.grad.norm() > 0.5


# ---------------------------------------------------------------------------------- broadcasting, dtypes
def test_broadcasting_and_curvature_tensor():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(5, 1, 3, generator=g, dtype=F64), torch.randn(1, 4, 3, generator=g, dtype=F64)
    assert dist(x, y, 1.0).shape == (5, 4) and exterior_angle(x, y, 1.0).shape == (5, 4)
    cs = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=F64)  # one curvature per column (batch shape (5,4))
    got = dist(x, y, cs)
    for j, cj in enumerate(cs.tolist()):
        torch.testing.assert_close(got[:, j], dist(x[:, 0], y[0, j], cj))
    torch.testing.assert_close(exterior_angle(x, y, cs)[:, 2], exterior_angle(x[:, 0], y[0, 2], 2.0))
    assert lorentz_time(x, cs).shape == (5, 4)
    with pytest.raises(ValueError, match="scalar curvature"):
        pairwise_dist(x[:, 0], y[0], cs)


def test_poincare_round_trip_and_scaling():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(20, 4, generator=g, dtype=F64) * 3
    for c in (0.2, 1.0, 5.0):
        p = lorentz_to_poincare(x, c)
        assert (p.norm(dim=-1) < 1).all()
        torch.testing.assert_close(poincare_to_lorentz(p, c), x, rtol=1e-9, atol=1e-9)
        num = 2 * (p[:-1] - p[1:]).pow(2).sum(-1)
        den = (1 - p[:-1].pow(2).sum(-1)) * (1 - p[1:].pow(2).sum(-1))
        torch.testing.assert_close(
            torch.acosh(1 + num / den) / math.sqrt(c), dist(x[:-1], x[1:], c), rtol=1e-7, atol=1e-9
        )


def test_dtypes_and_autocast_cpu_bf16():
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(16, 8, generator=g), torch.randn(12, 8, generator=g)
    plain = {
        "pd": pairwise_dist(x, y, 1.0),
        "pi": pairwise_inner(x, y, 1.0),
        "d": dist(x[:12], y, 1.0),
        "phi": exterior_angle(x[:12], y, 1.0),
        "e": exp_map0(x, 1.0),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (x @ y.T).dtype == torch.bfloat16  # autocast is really on for matmuls
        auto = {
            "pd": pairwise_dist(x, y, 1.0),
            "pi": pairwise_inner(x, y, 1.0),
            "d": dist(x[:12], y, 1.0),
            "phi": exterior_angle(x[:12], y, 1.0),
            "e": exp_map0(x, 1.0),
        }
        bf = pairwise_dist(x.bfloat16(), y.bfloat16(), 1.0)
    for k in plain:
        assert auto[k].dtype == torch.float32, k
        torch.testing.assert_close(auto[k], plain[k], rtol=1e-6, atol=1e-6)
    assert bf.dtype == torch.float32  # bf16 inputs are promoted
    torch.testing.assert_close(bf, pairwise_dist(x.bfloat16().float(), y.bfloat16().float(), 1.0))
    assert dist(x.double(), y[:1], 1.0).dtype == F64  # mixed: the wider float wins
    assert dist(torch.ones(2, 3, dtype=torch.int64), torch.zeros(3), 1.0).dtype == torch.float32


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "bad,c,match",
    [
        ([[0.0, 1.0]], 1.0, "torch.Tensor"),
        (torch.zeros(2, 3, dtype=torch.int64), 1.0, "floating dtype"),
        (torch.zeros(2, 3, dtype=torch.complex64), 1.0, "floating dtype"),
        (torch.tensor(1.0), 1.0, "shape"),
        (torch.zeros(4, 0), 1.0, "shape"),
        (torch.full((3, 2), 1e20), 1.0, "overflows"),
        (torch.zeros(2, 3), 0.0, "> 0"),
        (torch.zeros(2, 3), -1.0, "> 0"),
        (torch.zeros(2, 3), float("nan"), "> 0"),
        (torch.zeros(2, 3), "one", "number or tensor"),
        (torch.zeros(2, 3), torch.tensor([1.0, -1.0]), "> 0"),
        (torch.zeros(2, 3), torch.tensor([1.0, 1.0, 1.0]), "broadcast"),
        (torch.zeros(2, 3), torch.tensor(1), "floating"),
    ],
)
def test_check_point_rejects(bad, c, match):
    with pytest.raises(ValueError, match=match):
        check_point(bad, c)


def test_check_point_names_the_bad_entry():
    x = torch.zeros(3, 4, 2)
    x[1, 2, 0] = float("inf")
    x[2, 0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"text_emb has 2 non-finite.*\(1, 2, 0\): inf"):
        check_point(x, 1.0, name="text_emb")
    assert check_point(torch.randn(3, 2), torch.tensor([1.0, 2.0, 3.0])) is not None


def test_functions_reject_bad_curvature_and_ball():
    x = torch.zeros(2, 3)
    for c in (0.0, -2.0, float("inf")):
        with pytest.raises(ValueError, match="curvature"):
            dist(x, x, c)
    with pytest.raises(ValueError, match="unit ball"):
        poincare_to_lorentz(torch.tensor([[0.1, 0.0], [0.6, 0.8]]), 1.0)


def test_speed_helper_runs_tiny():
    out = geometry_speed_ratios(n=8, d=4, pairs=16, repeats=1, pair_d=4)
    assert {"pairwise_over_cosine", "angle_over_dist"} <= set(out) and out["pairwise_over_cosine"] > 0
