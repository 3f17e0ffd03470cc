"Tests of hierbench.viz.figures: HoroPCA numerics (reference values, Busemann preservation), figures, bad inputs."

import math
import os

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy import stats

from hierbench import geometry as geo
from hierbench.viz import figures as viz

F64 = torch.float64


def _finite_data(fig: go.Figure) -> bool:
    "True when every numeric x/y array of every trace is free of NaN/inf."
    for tr in fig.data:
        for attr in ("x", "y"):
            v = getattr(tr, attr, None)
            if v is None:
                continue
            arr = np.asarray(v)
            if arr.dtype.kind in "fiu" and not np.isfinite(arr).all():
                return False
    return True


def _random_ball(n, d, gen, max_norm=0.999):
    "n points (n, d) in the unit ball with radii spread up to max_norm (float64)."
    dirs = torch.randn(n, d, generator=gen, dtype=F64)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    r = max_norm * torch.rand(n, 1, generator=gen, dtype=F64) ** 0.5
    return dirs * r


def _random_ideals(k, d, gen):
    q, _ = torch.linalg.qr(torch.randn(d, k, generator=gen, dtype=F64))
    return q.T


# ---------------------------------------------------------------- Poincaré toolkit and reference values


def test_busemann_reference_values():
    e1 = torch.tensor([1.0, 0.0], dtype=F64)
    assert viz.busemann(torch.tensor([0.5, 0.0]), e1).item() == pytest.approx(-1.098612, abs=1e-6)
    assert viz.busemann(torch.tensor([0.0, 0.5]), e1).item() == pytest.approx(0.510826, abs=1e-6)
    # moving a distance t towards p lowers B_p by exactly t
    t = 1.7
    assert viz.busemann(torch.tensor([math.tanh(t / 2), 0.0], dtype=F64), e1).item() == pytest.approx(-t, abs=1e-12)
    # (K, D) ideals give (..., K)
    assert viz.busemann(torch.zeros(3, 2), torch.eye(2)).shape == (3, 2)


def test_horo_project_reference_values():
    y1 = viz.horo_project(torch.tensor([[0.0, 0.5]]), torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(y1, torch.tensor([[-0.25]], dtype=F64), atol=1e-12, rtol=0)
    y2 = viz.horo_project(torch.tensor([[0.0, 0.0, 0.5]]), torch.eye(3)[:2])
    torch.testing.assert_close(y2, torch.tensor([[-0.212695, -0.212695]], dtype=F64), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        viz.busemann(y2, torch.eye(2)), torch.full((1, 2), 0.510826, dtype=F64), atol=1e-6, rtol=0
    )


def test_k1_projection_is_minus_tanh_half_busemann():
    gen = torch.Generator().manual_seed(3)
    x, p = _random_ball(200, 5, gen), _random_ideals(1, 5, gen)
    expected = -torch.tanh(viz.busemann(x, p[0]) / 2)
    torch.testing.assert_close(viz.horo_project(x, p)[:, 0], expected, atol=1e-12, rtol=0)


def test_busemann_preserved_seeded_loops():
    gen = torch.Generator().manual_seed(0)
    for d, k in [(2, 1), (2, 2), (3, 2), (5, 3), (16, 2), (16, 5), (8, 8)]:
        x, P = _random_ball(300, d, gen), _random_ideals(k, d, gen)
        y = viz.horo_project(x, P)
        assert y.shape == (300, k)
        assert (y.norm(dim=-1) < 1).all()
        # the projection is the root closer to the origin: it never moves a point outward
        assert (y.norm(dim=-1) <= x.norm(dim=-1) + 1e-12).all()
        torch.testing.assert_close(viz.busemann(y, torch.eye(k, dtype=F64)), viz.busemann(x, P), atol=1e-11, rtol=1e-11)


def test_projection_picks_the_root_nearer_the_origin():
    # (a, a, 0) with a = 0.5877 lies in M = span(e1, e2) but its partner root (-0.2127, -0.2127) is nearer the
    # origin, so (Chami et al.'s definition) it does not project to itself — both keep the Busemann coordinates
    # both are roots of 32u² − 25u + 2 = 0 (u = ||y||²), y = (−1/3 + 4u/3)·(1, 1): the K = 2 reference example
    near_u, far_u = (25 - math.sqrt(369)) / 64, (25 + math.sqrt(369)) / 64
    P = torch.eye(3, dtype=F64)[:2]
    far = torch.tensor([[-1 / 3 + 4 * far_u / 3] * 2 + [0.0]], dtype=F64)
    y = viz.horo_project(far, P)
    torch.testing.assert_close(y, torch.full((1, 2), -1 / 3 + 4 * near_u / 3, dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(viz.busemann(y, torch.eye(2, dtype=F64)), viz.busemann(far, P), atol=1e-12, rtol=0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    d=st.integers(2, 10),
    k=st.integers(1, 4),
    max_norm=st.sampled_from([0.3, 0.9, 0.9999, 0.999999]),
)
def test_busemann_preserved_property(seed, d, k, max_norm):
    k = min(k, d)
    gen = torch.Generator().manual_seed(seed)
    x, P = _random_ball(20, d, gen, max_norm), _random_ideals(k, d, gen)
    y = viz.horo_project(x, P)
    assert torch.isfinite(y).all() and (y.norm(dim=-1) < 1).all()
    torch.testing.assert_close(viz.busemann(y, torch.eye(k, dtype=F64)), viz.busemann(x, P), atol=1e-10, rtol=1e-10)


def test_points_of_the_submanifold_near_origin_project_to_themselves():
    gen = torch.Generator().manual_seed(5)
    P = _random_ideals(2, 6, gen)
    coords = 0.3 * _random_ball(50, 2, gen)  # norm ≤ 0.3: the smaller of the two roots
    torch.testing.assert_close(viz.horo_project(coords @ P, P), coords, atol=1e-10, rtol=0)
    # K = 1: every point of the geodesic is its own projection
    line = torch.linspace(-0.99, 0.99, 21, dtype=F64)[:, None]
    torch.testing.assert_close(viz.horo_project(line * P[:1], P[:1]), line, atol=1e-10, rtol=0)


def test_poincare_dist_matches_acosh_formula_and_is_stable():
    gen = torch.Generator().manual_seed(1)
    x, y = _random_ball(100, 4, gen, 0.95), _random_ball(100, 4, gen, 0.95)
    z = 1 + 2 * ((x - y) ** 2).sum(-1) / ((1 - (x * x).sum(-1)) * (1 - (y * y).sum(-1)))
    torch.testing.assert_close(viz.poincare_dist(x, y), torch.acosh(z))
    # close points: the asinh form keeps relative precision where acosh(1 + tiny) cannot
    a = torch.tensor([0.3, 0.1], dtype=F64)
    assert viz.poincare_dist(a, a + 1e-9).item() == pytest.approx(2 * 1e-9 * math.sqrt(2) / (1 - 0.1), rel=1e-6)
    assert viz.poincare_dist(a, a).item() == 0.0


def test_frechet_mean_stationary_and_equivariant():
    gen = torch.Generator().manual_seed(2)
    x = _random_ball(60, 3, gen, 0.9)
    m = viz.frechet_mean(x)
    # first-order condition: the mean of the log maps at m vanishes
    assert viz.poincare_log0(viz.mobius_add(-m, x)).mean(0).norm() < 1e-10
    # moving the cloud by an isometry moves the mean with it
    g = torch.tensor([0.2, -0.4, 0.1], dtype=F64)
    torch.testing.assert_close(viz.frechet_mean(viz.mobius_add(g, x)), viz.mobius_add(g, m), atol=1e-9, rtol=0)


def test_frechet_mean_of_a_wide_high_dimensional_cloud():
    # points ≈ 10 from their mean in 256-D: the plain step-1 Karcher iteration diverges here
    gen = torch.Generator().manual_seed(0)
    v = 0.6 * torch.randn(300, 256, generator=gen, dtype=F64) + 0.5
    x = geo.lorentz_to_poincare(geo.exp_map0(v, 1.0), 1.0)
    m = viz.frechet_mean(x)
    assert viz.poincare_log0(viz.mobius_add(-m, x)).mean(0).norm() < 1e-8
    f = viz.frechet_objective(m, x)
    for _ in range(5):  # any nearby point is worse
        other = viz.mobius_add(m, 1e-3 * torch.randn(256, generator=gen, dtype=F64))
        assert viz.frechet_objective(other, x) > f


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="outside the unit ball"):
        viz.busemann(torch.tensor([0.8, 0.7]), torch.tensor([1.0, 0]))
    with pytest.raises(ValueError, match="outside the unit ball"):
        viz.horo_project(torch.tensor([[1.0, 0.0]]), torch.eye(2)[:1])
    with pytest.raises(ValueError, match="orthonormal"):
        viz.horo_project(torch.zeros(1, 3), torch.tensor([[1.0, 0, 0], [1, 1, 0]]))
    with pytest.raises(ValueError, match="orthonormal"):
        viz.busemann(torch.zeros(2), torch.tensor([2.0, 0.0]))
    with pytest.raises(ValueError, match=r"shape \(K, 3\)"):
        viz.horo_project(torch.zeros(1, 3), torch.eye(2))
    with pytest.raises(ValueError, match="NaN"):
        viz.horo_project(torch.tensor([[float("nan"), 0.0]]), torch.eye(2)[:1])
    with pytest.raises(ValueError, match="outside the unit ball"):
        viz.frechet_mean(torch.tensor([[0.2, 0.0], [3.0, 0.0]]))


# ---------------------------------------------------------------- HoroPCA


@pytest.fixture(scope="module")
def tree():
    return viz.random_tree_embeddings(depth=3, branching=3, dim=8, c=1.0, seed=0)


def test_horopca_fit_transform(tree):
    x, depth, _ = tree
    hp = viz.HoroPCA(n_components=2, steps=40).fit(x, c=1.0)
    y = hp.transform(x)
    assert y.shape == (len(x), 2) and np.isfinite(y).all() and (np.linalg.norm(y, axis=1) < 1).all()
    torch.testing.assert_close(hp.components_ @ hp.components_.T, torch.eye(2, dtype=F64), atol=1e-10, rtol=0)
    assert (np.diff(hp.history_) > -1e-12).all()  # full batch: monotone ascent (up to rounding at convergence)
    # the defining property holds on the fitted model too
    xc = viz.mobius_add(-hp.mean_, geo.lorentz_to_poincare(x.double(), 1.0))
    torch.testing.assert_close(
        viz.busemann(torch.tensor(y), torch.eye(2, dtype=F64)), viz.busemann(xc, hp.components_), atol=1e-8, rtol=1e-8
    )
    # deterministic
    np.testing.assert_array_equal(viz.HoroPCA(n_components=2, steps=40).fit_transform(x, 1.0), y)


def test_horopca_subsampling_and_k1(tree):
    x, _, _ = tree
    y = viz.HoroPCA(n_components=1, steps=20, max_points=16, seed=3).fit_transform(x, 1.0)
    assert y.shape == (len(x), 1) and np.isfinite(y).all()
    y3 = viz.HoroPCA(n_components=3, steps=10, max_points=16).fit_transform(x, 1.0)
    assert y3.shape == (len(x), 3) and (np.linalg.norm(y3, axis=1) < 1).all()


def test_horopca_improves_on_its_start():
    gen = torch.Generator().manual_seed(11)
    x = geo.exp_map0(
        torch.randn(60, 5, generator=gen, dtype=F64) * torch.tensor([1.5, 1.0, 0.6, 0.3, 0.2], dtype=F64), 1.0
    )
    start = viz.HoroPCA(steps=0).fit(x, 1.0)
    fitted = viz.HoroPCA(steps=100).fit(x, 1.0)
    xc = viz.mobius_add(-fitted.mean_, geo.lorentz_to_poincare(x, 1.0))
    assert viz.horopca_objective(xc, fitted.components_) > viz.horopca_objective(xc, start.components_)


def test_horopca_curvature_only_rescales(tree):
    x, _, _ = tree
    c = 2.5  # the same Poincaré points: x at curvature -1 equals x / sqrt(c) at curvature -c
    a = viz.HoroPCA(steps=20).fit_transform(x, 1.0)
    b = viz.HoroPCA(steps=20).fit_transform(x / math.sqrt(c), c)
    np.testing.assert_allclose(a, b, atol=1e-8)


def test_horopca_recovers_a_geodesic_plane():
    gen = torch.Generator().manual_seed(7)
    plane = _random_ideals(2, 6, gen)  # orthonormal basis of a 2-D subspace of R^6
    pts = geo.poincare_to_lorentz(_random_ball(80, 2, gen, 0.6) @ plane, 1.0)
    hp = viz.HoroPCA(n_components=2, steps=30).fit(pts, 1.0)
    # learned ideals lie in the plane: their projection onto it keeps unit length
    torch.testing.assert_close((hp.components_ @ plane.T).norm(dim=-1), torch.ones(2, dtype=F64), atol=1e-6, rtol=0)
    # and the projection then preserves the distances between the (centred) points
    y = torch.tensor(hp.transform(pts))
    xc = viz.mobius_add(-hp.mean_, geo.lorentz_to_poincare(pts, 1.0))
    near = xc.norm(dim=-1) < 0.4  # inside the fold: the geodesic between two orthogonal ideals stays ≥ √2 − 1 from 0
    d_proj = viz.poincare_dist(y[near][:, None], y[near][None])
    d_orig = viz.poincare_dist(xc[near][:, None], xc[near][None])
    torch.testing.assert_close(d_proj, d_orig, atol=1e-6, rtol=1e-6)


def test_horopca_bad_inputs(tree):
    x, _, _ = tree
    with pytest.raises(ValueError, match="n_components"):
        viz.HoroPCA(n_components=9).fit(x, 1.0)
    with pytest.raises(RuntimeError, match="fit"):
        viz.HoroPCA().transform(x)
    with pytest.raises(ValueError, match="c:"):
        viz.HoroPCA().fit(x, 0.0)
    with pytest.raises(ValueError, match="at least 2"):
        viz.HoroPCA().fit(x[:1], 1.0)
    hp = viz.HoroPCA(steps=2).fit(x, 1.0)
    with pytest.raises(ValueError, match="dimension 8"):
        hp.transform(x[:, :4])
    with pytest.raises(ValueError, match="NaN"):
        viz.HoroPCA().fit(torch.full((4, 3), float("nan")), 1.0)


# ---------------------------------------------------------------- 2-D projections


def test_projection_figures(tree):
    x, depth, _ = tree
    labels = [f"depth {d}" for d in depth]
    fig = viz.projection_figure(x, "horopca", labels=labels, steps=5)
    assert isinstance(fig, go.Figure) and len(fig.data) == 1 + 4 and _finite_data(fig)
    assert sum(len(t.x) for t in fig.data[1:]) == len(x)
    fig = viz.projection_figure(x, "pca", labels=labels, hover=[str(i) for i in range(len(x))])
    assert len(fig.data) == 4 and _finite_data(fig)
    assert len(viz.projection_figure(x, "pca").data) == 1
    xy = viz.project_2d(x, "pca")
    assert xy.shape == (len(x), 2)
    # Euclidean PCA of unit vectors works as well
    e = torch.nn.functional.normalize(torch.randn(20, 5, generator=torch.Generator().manual_seed(0)), dim=-1)
    assert viz.project_2d(e, "pca", geometry="euclidean").shape == (20, 2)


def test_horopca_and_comparison_figures(tree):
    x, depth, _ = tree
    fig = viz.horopca_figure(x, c=1.0, labels=depth, steps=5)
    assert len(fig.data) == 1 + 4 and _finite_data(fig)
    fig = viz.projection_comparison_figure(x, ("horopca", "pca"), labels=depth, horopca_kwargs=dict(steps=5))
    assert len(fig.data) == (1 + 4) + 4 and _finite_data(fig)
    assert sum(bool(t.showlegend) for t in fig.data) == 4  # one legend entry per label
    assert len(viz.projection_comparison_figure(x, ("pca",)).data) == 1


def test_projection_bad_inputs(tree):
    x, _, _ = tree
    with pytest.raises(ValueError, match="method"):
        viz.project_2d(x, "tsne")
    with pytest.raises(ValueError, match="lorentz"):
        viz.project_2d(x, "horopca", geometry="euclidean")
    with pytest.raises(ValueError, match="geometry"):
        viz.project_2d(x, "pca", geometry="spherical")
    with pytest.raises(ValueError, match="labels"):
        viz.projection_figure(x, "pca", labels=["a", "b"])
    with pytest.raises(ValueError, match="N ≥ 3"):
        viz.project_2d(x[:2], "pca")


@pytest.mark.skipif(
    os.environ.get("HIERBENCH_SLOW_TESTS") != "1",
    reason="umap-learn JIT-compiles for ~10 s; set HIERBENCH_SLOW_TESTS=1",
)
def test_umap_projection(tree):
    x, depth, _ = tree
    fig = viz.projection_figure(x, "umap", labels=depth)
    assert len(fig.data) == 4 and _finite_data(fig)
    e = torch.nn.functional.normalize(torch.randn(30, 5, generator=torch.Generator().manual_seed(0)), dim=-1)
    assert viz.project_2d(e, "umap", geometry="euclidean").shape == (30, 2)


# ---------------------------------------------------------------- norms


def test_embedding_norms():
    x = torch.tensor([[1.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(viz.embedding_norms(x, "lorentz", 1.0), [0.881374, 2.312438], atol=1e-6)
    np.testing.assert_allclose(viz.embedding_norms(x, "euclidean"), [1.0, 5.0])
    # d(O, exp_map0(v)) = ||v|| for any c
    v = torch.tensor([[0.3, -1.1, 0.4]], dtype=F64)
    for c in (0.5, 2.0):
        np.testing.assert_allclose(viz.embedding_norms(geo.exp_map0(v, c), "lorentz", c), [v.norm().item()], rtol=1e-9)
    with pytest.raises(ValueError, match="geometry"):
        viz.embedding_norms(x, "hyperbolic")
    with pytest.raises(ValueError, match="c:"):
        viz.embedding_norms(x, "lorentz", -1.0)


def test_inputs_from_a_model_are_accepted():
    # embeddings straight from a model: float32/bfloat16, requiring grad
    e = geo.exp_map0(torch.randn(12, 4, generator=torch.Generator().manual_seed(0)), 1.0).requires_grad_(True)
    assert np.isfinite(viz.embedding_norms(e, "lorentz")).all()
    assert np.isfinite(viz.embedding_norms(e.detach().bfloat16(), "lorentz")).all()
    assert viz.project_2d(e, "horopca", steps=3).shape == (12, 2)
    assert len(viz.entailment_table(e[0], e[1:])) == 11


def test_norm_distribution_figures():
    rng = np.random.default_rng(0)
    groups = {m: rng.gamma(2, size=30) for m in ["images", "crops", "captions", "phrases"]}
    for kind in ("violin", "hist"):
        fig = viz.norm_distribution_figure(groups, kind)
        assert len(fig.data) == 4 and _finite_data(fig)
    tab = viz.norms_table(
        {"images": torch.randn(10, 3), "captions": torch.randn(6, 3)},
        "lorentz",
        1.0,
        levels={"captions": [0, 1, 2, 3, 0, 1]},
    )
    assert list(tab.columns) == ["modality", "level", "norm"] and len(tab) == 16
    fig = viz.norm_distribution_figure(tab, "violin")
    assert len(fig.data) == 2 and set(fig.data[1].x) == {"0", "1", "2", "3"}


def test_norm_distribution_bad_inputs():
    with pytest.raises(ValueError, match="kind"):
        viz.norm_distribution_figure({"a": [1.0]}, "box")
    with pytest.raises(ValueError, match="modality"):
        viz.norm_distribution_figure(pd.DataFrame(dict(norm=[1.0])))
    with pytest.raises(ValueError, match="NaN"):
        viz.norm_distribution_figure({"a": [1.0, float("nan")]})
    with pytest.raises(ValueError, match="empty"):
        viz.norm_distribution_figure({"a": []})
    with pytest.raises(TypeError):
        viz.norm_distribution_figure([1.0, 2.0])
    with pytest.raises(ValueError, match="levels"):
        viz.norms_table({"a": torch.ones(3, 2)}, levels={"a": [0]})


# ---------------------------------------------------------------- entailment


def test_entailment_table_reference():
    tab = viz.entailment_table(torch.tensor([0.5, 0.0]), torch.tensor([[2.0, 0.5], [3.0, 0.0], [0.0, 1.0]]), 1.0, 0.1)
    np.testing.assert_allclose(tab.phi[:2], [0.429931, 0.0], atol=2e-4)
    np.testing.assert_allclose(tab.omega, 0.411517, atol=1e-6)
    assert tab.inside_cone.tolist() == [False, True, False]
    np.testing.assert_allclose(tab.pep, np.maximum(0, 1 - 2 * tab.phi / np.pi))
    assert viz.pep_score([0.0, np.pi / 4, np.pi]).tolist() == [1.0, 0.5, 0.0]
    assert list(tab.columns) == ["child", "phi", "omega", "inside_cone", "pep"]


def test_entailment_plane_is_an_isometry_of_each_triangle():
    gen = torch.Generator().manual_seed(4)
    par = geo.exp_map0(torch.randn(6, generator=gen, dtype=F64), 1.5)
    kids = 2 * torch.randn(10, 6, generator=gen, dtype=F64)
    p2, k2 = viz.entailment_plane(par, kids)
    c = 1.5
    torch.testing.assert_close(
        geo.exterior_angle(p2.expand_as(k2), k2, c), geo.exterior_angle(par.expand_as(kids), kids, c)
    )
    torch.testing.assert_close(geo.dist(p2.expand_as(k2), k2, c), geo.dist(par.expand_as(kids), kids, c))
    torch.testing.assert_close(geo.dist0(k2, c), geo.dist0(kids, c))


@pytest.mark.parametrize("c,K,norm", [(1.0, 0.1, 0.8), (2.0, 0.1, 0.3), (0.5, 0.2, 3.0), (1.0, 0.1, 0.15)])
def test_cone_boundary_is_at_the_half_aperture(c, K, norm):
    p2 = torch.tensor([norm, 0.0], dtype=F64)
    omega = float(geo.half_aperture(p2[None], c, K)[0])
    plus, minus = viz.cone_boundary(geo.lorentz_to_poincare(p2[None], c)[0], omega)
    for ray in (plus, minus):
        pts = geo.poincare_to_lorentz(torch.tensor(ray[3:70]), c)
        torch.testing.assert_close(
            geo.exterior_angle(p2.expand_as(pts), pts, c), torch.full((67,), omega, dtype=F64), atol=1e-6, rtol=0
        )
        assert (np.linalg.norm(ray, axis=1) < 1).all()


def test_entailment_disk_figure():
    gen = torch.Generator().manual_seed(0)
    par = geo.exp_map0(torch.tensor([1.0, 0.5, 0.0, -0.3], dtype=F64), 1.0)
    kids = 1.5 * par + torch.randn(7, 4, generator=gen, dtype=F64)
    fig = viz.entailment_disk_figure(par, kids, 1.0, 0.1, labels=[f"k{i}" for i in range(7)])
    assert isinstance(fig, go.Figure) and len(fig.data) == 5 and _finite_data(fig)
    assert len(fig.data[4].x) == 7
    # a saturated parent (norm below 2K/sqrt(c)) still draws
    fig = viz.entailment_disk_figure(torch.tensor([0.1, 0.0]), torch.tensor([[0.5, 0.5]]), 1.0, 0.1)
    assert _finite_data(fig)
    with pytest.raises(ValueError, match="origin"):
        viz.entailment_disk_figure(torch.zeros(2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="shapes"):
        viz.entailment_table(torch.ones(3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="names"):
        viz.entailment_table(torch.ones(2), torch.ones(2, 2), names=["a"])


def test_aperture_saturation():
    assert viz.saturated_fraction([0.1, math.pi / 2, 0.99 * math.pi / 2]) == pytest.approx(2 / 3)
    assert viz.saturated_fraction([1.5], threshold=0.9) == 1.0
    run = {10: [1.56, 0.2], 0: [0.1, 0.2]}
    fig = viz.aperture_saturation_figure(run)
    assert len(fig.data) == 1 and list(fig.data[0].x) == [0, 10] and list(fig.data[0].y) == [0.0, 0.5]
    fig = viz.aperture_saturation_figure({"a": run, "b": [dict(step=0, omega=[1.57]), dict(step=5, omega=[0.3])]})
    assert len(fig.data) == 2 and list(fig.data[1].y) == [1.0, 0.0] and _finite_data(fig)
    with pytest.raises(ValueError, match="omega"):
        viz.saturated_fraction([])
    with pytest.raises(ValueError, match="step"):
        viz.aperture_saturation_figure([dict(omega=[1.0])])
    with pytest.raises(ValueError, match="empty"):
        viz.aperture_saturation_figure({})


# ---------------------------------------------------------------- training and sweeps


def test_training_curves_figure():
    rows = [
        dict(
            step=s,
            lr=1e-3,
            loss=1 / (s + 1),
            contrastive=0.5 / (s + 1),
            grad_norm=1.0,
            curvature=1.0,
            alpha_image=0.1,
            alpha_text=0.1,
            logit_scale=10.0,
            time=s * 0.1,
        )
        for s in range(5)
    ]
    fig = viz.training_curves_figure(rows)
    assert len(fig.data) == 8 and _finite_data(fig)
    assert [a.text for a in fig.layout.annotations] == [
        "losses",
        "learning rate",
        "gradient norm",
        "curvature c",
        "lifting scale α",
        "logit scale",
    ]
    rows[2]["loss"] = float("nan")
    fig = viz.training_curves_figure(rows, keys=["loss", "curvature"])
    assert len(fig.data) == 2 and _finite_data(fig) and "1 non-finite" in fig.layout.title.text
    assert len(viz.training_curves_figure([dict(step=0, loss=1.0)]).data) == 1
    with pytest.raises(ValueError, match="empty"):
        viz.training_curves_figure([])
    with pytest.raises(ValueError, match="step"):
        viz.training_curves_figure([dict(loss=1.0)])
    with pytest.raises(ValueError, match="not logged"):
        viz.training_curves_figure(rows, keys=["accuracy"])


def test_confidence_intervals_match_scipy():
    vals = {"clip": [0.50, 0.52, 0.49, 0.51], "meru": [0.55, 0.57], "argent": [0.6]}
    res = [dict(recipe=r, seed=i, metric="R@5", value=v) for r, vs in vals.items() for i, v in enumerate(vs)]
    res += [dict(recipe="clip", seed=0, metric="acc", value=0.9)]
    ci = viz.confidence_intervals(res, "R@5", recipes=["meru", "clip", "argent"])
    assert ci.recipe.tolist() == ["meru", "clip", "argent"] and ci.n.tolist() == [2, 4, 1]
    for r in ("clip", "meru"):
        v = np.array(vals[r])
        lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
        row = ci[ci.recipe == r].iloc[0]
        assert row.low == pytest.approx(lo) and row.high == pytest.approx(hi)
    assert ci.iloc[2].half_width == 0.0
    wide = pd.DataFrame(dict(recipe=["a", "a", "b"], seed=[0, 1, 0], acc=[0.1, 0.3, 0.2]))
    assert viz.confidence_intervals(wide, "acc").n.tolist() == [2, 1]
    fig = viz.ablation_bars_figure(res, "R@5")
    assert isinstance(fig, go.Figure) and len(fig.data) == 1 and _finite_data(fig)
    assert np.isfinite(np.asarray(fig.data[0].error_y.array, dtype=float)).all()


def test_confidence_interval_bad_inputs():
    res = pd.DataFrame(dict(recipe=["a", "a"], seed=[0, 1], metric=["acc", "acc"], value=[0.1, float("nan")]))
    with pytest.raises(ValueError, match="non-finite"):
        viz.confidence_intervals(res, "acc")
    with pytest.raises(ValueError, match="R@1"):
        viz.confidence_intervals(res, "R@1")
    with pytest.raises(ValueError, match=r"R@1.*\['acc'\]"):
        viz.confidence_intervals(res.to_dict("records"), "R@1")
    with pytest.raises(ValueError, match=r"\['b'\]"):
        viz.confidence_intervals(res.fillna(0.2), "acc", recipes=["a", "b"])
    with pytest.raises(ValueError, match="confidence"):
        viz.confidence_intervals(res, "acc", confidence=95)
    with pytest.raises(ValueError, match="recipe"):
        viz.confidence_intervals(pd.DataFrame(dict(x=[1])), "x")
