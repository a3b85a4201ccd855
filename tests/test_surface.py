"""Loss-landscape surfaces: grid, chunking, PCA directions, projection, filter normalisation,
Hessian eigenvectors, and ``python -m jobs surface`` on stored runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from clitest import jobs as cli

import landscapes
from cli.main import main
from landscapes import ParamError, Target
from landscapes import directions as D
from landscapes import surface as S
from runs.loop import execute
from runs.spec import parse_spec
from runs.store import Store


def mlp():
    return landscapes.make("mlp", hidden_sizes=(8,), device="cpu", dtype="float64")


def test_grid_centre_is_the_reference_loss_and_chunks_do_not_change_the_grid():
    target = mlp()
    theta = target.initial(torch.Generator().manual_seed(0), 1)[0].numpy()
    vectors = S.random_directions(target, theta, seed=1).vectors
    c = S.coordinates(9, 0.5)
    assert c[4] == 0.0 and c[0] == -0.5 and c[-1] == 0.5
    np.testing.assert_array_equal(S.coordinates(np.int64(9), 0.5), c)  # e.g. from an array
    one = S.grid_losses(target, theta, vectors, c, c, chunk=1)
    some = S.grid_losses(target, theta, vectors, c, c, chunk=7)
    all_at_once = S.grid_losses(target, theta, vectors, c, c, chunk=81)
    assert one.shape == (9, 9)
    np.testing.assert_allclose(some, one, rtol=1e-13)
    np.testing.assert_allclose(all_at_once, one, rtol=1e-13)
    reference = float(target.full_loss(torch.from_numpy(theta)[None])[0])
    assert one[4, 4] == pytest.approx(reference, rel=1e-13)
    # loss[i, j] is at (c0[i], c1[j]): an asymmetric point, evaluated on its own
    point = torch.from_numpy(theta + c[1] * vectors[0] + c[6] * vectors[1])[None]
    assert one[1, 6] == pytest.approx(float(target.loss(point)[0]), rel=1e-13)
    # a 1-D sweep along v1 is the grid's centre column
    np.testing.assert_allclose(S.sweep(target, theta, vectors[1], c), one[4], rtol=1e-13)


@pytest.mark.parametrize(
    "name, params",
    [
        ("dln", {}),  # 100,000 points, output narrower than input: the chain starts at W_M
        ("dln", {"widths": (3, 5, 9), "n": 500}),  # output wider: the chain starts at W_1
        ("rrr", {}),
    ],
)
def test_the_deep_linear_full_loss_equals_a_forward_pass_at_every_point(name, params):
    """DeepLinear.full_loss evaluates the loss from the data's second moments; each value must
    equal the mean over all n points of the ordinary forward pass's squared error, on the
    plane too (surfaces) and for float32 targets (whose result stays float32)."""
    target = landscapes.make(name, dtype="float64", **params)
    g = torch.Generator().manual_seed(4)
    theta, vectors = target.initial(g, 1)[0], target.initial(g, 2)
    a = torch.tensor([0.0, 0.7, 0.7, -1.3, 2.0], dtype=torch.float64)
    b = torch.tensor([0.0, -0.4, 0.9, 1.5, 3.0], dtype=torch.float64)
    points = theta + a[:, None] * vectors[0] + b[:, None] * vectors[1]
    expected = target.sample_losses(points).mean(-1)  # forward passes, not the moments
    torch.testing.assert_close(target.full_loss(points), expected, rtol=1e-10, atol=0)
    for chunk in (1, 2, 5):
        got = target.plane_loss(theta, vectors, a, b, chunk)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=0)
    single = landscapes.make(name, dtype="float32", **params)
    got = single.full_loss(points.float())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=0)


# The plane path sums pre(theta) + a pre(v0) + b pre(v1), a forward pass the point's own weights:
# they round apart by <20 unit roundoffs (6e-8 float32, 1.1e-16 float64); rtols allow ~30 and ~900.
@pytest.mark.parametrize("dtype, rtol", [("float32", 2e-6), ("float64", 1e-13)])
@pytest.mark.parametrize(
    "dataset, hidden, activation",
    [
        ("digits", (8,), "relu"),
        ("moons", (5, 4), "tanh"),
        ("moons", (3,), "gelu"),
        ("two-clusters", (6,), "sigmoid"),  # regression: squared error
        ("digits", (), "relu"),  # the SLP: the first layer is the whole network
        ("digits", (40, 25), "relu"),
    ],
)
def test_the_mlp_plane_loss_equals_a_forward_pass_at_every_point(
    dataset, hidden, activation, dtype, rtol, monkeypatch
):
    """MLP.plane_loss shares the first layer's pre-activations across the plane and a row's
    pre(theta) + a pre(v0) across its points; each value must equal the loss of an ordinary
    float64 forward pass at the point itself (``target.loss``), also across data chunks."""
    import landscapes.mlp as N

    exact = landscapes.make(
        "mlp", dataset=dataset, hidden_sizes=hidden, activation=activation, dtype="float64"
    )
    target = landscapes.make(
        "mlp", dataset=dataset, hidden_sizes=hidden, activation=activation, dtype=dtype
    )
    g = torch.Generator().manual_seed(3)
    theta, vectors = target.initial(g, 1)[0], target.initial(g, 2)
    # rows of equal a (cut into parts by the chunk), single points, a row's a again later
    a = torch.tensor([0.0, 0.7, 0.7, 0.7, -1.3, -1.3, 2.0, -0.2, 0.7], dtype=target.dtype)
    b = torch.tensor([0.0, -0.4, 0.9, 1.5, 3.0, -2.1, 0.3, 1.1, 0.5], dtype=target.dtype)
    grid_a, grid_b = torch.meshgrid(
        torch.linspace(-2.0, 2.0, 9), torch.linspace(-3.0, 1.0, 9), indexing="ij"
    )
    a = torch.cat([a, grid_a.reshape(-1).to(target.dtype)])
    b = torch.cat([b, grid_b.reshape(-1).to(target.dtype)])
    t, v, a64, b64 = (x.double() for x in (theta, vectors, a, b))  # the same numbers
    expected = exact.loss(t + a64[:, None] * v[0] + b64[:, None] * v[1])
    for chunk in (2, 5):
        got = target.plane_loss(theta, vectors, a, b, chunk)
        assert got.dtype == target.dtype
        torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=0)
    monkeypatch.setattr(N, "DATA_CHUNK", 97)  # several data chunks, the last one short
    got = target.plane_loss(theta, vectors, a, b, chunk=3)
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=0)


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "gelu"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_mlp_plane_loss_keeps_overflow_and_nan_non_finite(activation, dtype):
    """A grid point far out overflows: its loss must be non-finite (``finite`` then shows a
    gap), never a made-up finite value, and the points that fit stay as a forward pass has them."""
    target = landscapes.make("mlp", hidden_sizes=(8,), activation=activation, dtype=dtype)
    g = torch.Generator().manual_seed(3)
    theta, vectors = target.initial(g, 1)[0], target.initial(g, 2)
    big = 1e38 if dtype == "float32" else 1e307
    a = torch.tensor([0.0, 30.0, 1e20, big, math.nan, math.inf, 0.0], dtype=target.dtype)
    b = torch.tensor([0.0, -30.0, 1e20, big, 0.0, 0.0, -math.inf], dtype=target.dtype)
    got = target.plane_loss(theta, vectors, a, b, chunk=4)
    assert not torch.isfinite(got[3:]).any()
    forward = target.loss(theta + a[:2, None] * vectors[0] + b[:2, None] * vectors[1])
    torch.testing.assert_close(got[:2], forward, rtol=1e-5, atol=0)


def test_equal_runs_cuts_rows_into_the_fewest_equal_parts():
    from landscapes.mlp import equal_runs

    assert equal_runs([1.0] * 41, 33) == [(0, 20), (20, 41)]
    assert equal_runs([1.0] * 41, 41) == [(0, 41)]
    assert equal_runs([0.0, 0.0, 5.0, 0.0], 8) == [(0, 2), (2, 3), (3, 4)]
    assert equal_runs([2.0] * 7, 3) == [(0, 2), (2, 4), (4, 7)]
    assert equal_runs([], 3) == []


def gaussian_trajectory(eigenvalues, d, chains, draws, seed):
    rng = np.random.default_rng(seed)
    axes = np.linalg.qr(rng.standard_normal((d, d)))[0].T  # rows: the principal axes
    z = rng.standard_normal((chains, draws, len(eigenvalues))) * np.sqrt(eigenvalues)
    return z @ axes[: len(eigenvalues)] + 3.0, axes


@pytest.mark.parametrize("method", ["exact", "randomized", "incremental"])
def test_pca_finds_the_known_axes_and_spectrum_of_a_gaussian(method):
    lam = np.array([16.0, 8.0, 4.0, 2.0, 1.0, 0.5])
    points, axes = gaussian_trajectory(lam, 6, 8, 2500, seed=3)
    n = points.shape[0] * points.shape[1]
    result = S.pca(points, k=4, method=method)
    v = result.components
    np.testing.assert_allclose(v @ v.T, np.eye(4), atol=1e-10)
    # Sample eigenvalues have SE lam sqrt(2 / n); ratios inherit it (the total is sharper).
    ratio = lam / lam.sum()
    error = np.abs(result.explained_variance_ratio - ratio[:4])
    assert np.all(error < 5 * math.sqrt(2 / n) * ratio[:4]), error
    assert np.all(np.diff(result.explained_variance_ratio) < 0)
    for j in range(4):
        # Eigenvector angle SD: sqrt(sum_k lam_j lam_k / (n (lam_j - lam_k)^2)) (Anderson 1963).
        others = np.delete(lam, j)
        sd = math.sqrt(np.sum(lam[j] * others / (n * (lam[j] - others) ** 2)))
        angle = math.acos(min(1.0, abs(v[j] @ axes[j])))
        assert angle < 5 * sd, (j, angle, sd)


def test_randomized_pca_of_a_wide_trajectory_matches_the_exact_svd():
    # d >> points, as in a network's snapshots: a few strong directions over isotropic noise.
    lam = np.array([50.0, 20.0, 10.0, 5.0])
    signal, _ = gaussian_trajectory(lam, 3000, 4, 100, seed=4)
    points = signal + 0.05 * np.random.default_rng(5).standard_normal(signal.shape)
    exact = S.pca(points, k=10, method="exact")
    fast = S.pca(points, k=10, method="randomized")
    np.testing.assert_allclose(
        fast.explained_variance_ratio[:4], exact.explained_variance_ratio[:4], rtol=1e-6
    )
    overlaps = np.abs(np.sum(fast.components[:4] * exact.components[:4], axis=1))
    assert np.all(overlaps > 1 - 1e-8)


def test_the_projection_of_a_plane_point_is_its_coordinates():
    target = mlp()
    theta = target.initial(torch.Generator().manual_seed(0), 1)[0].numpy()
    points, _ = gaussian_trajectory(np.ones(5), target.dim, 1, 50, seed=6)
    orthonormal = S.pca_directions(S.pca(points, k=5), (1, 3)).vectors
    skewed = S.random_directions(target, theta, seed=2).vectors  # neither unit nor orthogonal
    assert abs(skewed[0] @ skewed[1]) > 1e-3 and abs(np.linalg.norm(skewed[0]) - 1) > 1e-3
    for vectors in (orthonormal, skewed):
        ab = np.array([[0.3, -1.7], [2.0, 0.0], [0.0, 0.0]])
        on_plane = theta + ab @ vectors
        coords, off = S.project(on_plane, theta, vectors)
        np.testing.assert_allclose(coords, ab, atol=1e-10)
        np.testing.assert_allclose(off, 0.0, atol=1e-9)
        # a step u orthogonal to the plane moves the point |u| off it and not along it
        u = np.random.default_rng(7).standard_normal(target.dim)
        u -= vectors.T @ np.linalg.solve(vectors @ vectors.T, vectors @ u)
        coords, off = S.project(on_plane[0] + u, theta, vectors)
        np.testing.assert_allclose(coords, ab[0], atol=1e-10)
        assert off == pytest.approx(np.linalg.norm(u), rel=1e-10)


def test_filter_normalisation_gives_each_filter_the_norm_of_the_reference_filter():
    target = mlp()
    theta = target.initial(torch.Generator().manual_seed(0), 1)[0].numpy()
    dirs = S.random_directions(target, theta, seed=3)
    assert dirs.meta["normalisation"] == "filter"
    for vector in dirs.vectors:
        i = 0
        for name, shape in target.layout.items():
            size = math.prod(shape)
            part, ref = vector[i : i + size], theta[i : i + size]
            if name.endswith("bias"):
                assert np.all(part == 0)  # Li et al. leave biases out
            else:
                np.testing.assert_allclose(
                    np.linalg.norm(part.reshape(shape), axis=1),
                    np.linalg.norm(ref.reshape(shape), axis=1),
                    rtol=1e-12,
                )
            i += size
    # potentials have no filters: two orthonormal random directions
    banana = landscapes.make("banana", device="cpu", dtype="float64")
    unit = S.random_directions(banana, np.zeros(2), seed=0).vectors
    np.testing.assert_allclose(unit @ unit.T, np.eye(2), atol=1e-12)


class Quadratic(Target):
    """L(w) = w^T A w / 2: its Hessian is A everywhere."""

    def __init__(self, a: np.ndarray):
        self.name, self.dim, self.layout = "quadratic", len(a), {"w": (len(a),)}
        self.a = torch.from_numpy(a)
        self.dtype = torch.float64

    def _loss(self, w, batch):
        return 0.5 * torch.einsum("ci,ij,cj->c", w, self.a, w)


@pytest.mark.parametrize("method", ["lanczos", "dense"])
def test_hessian_eigenvectors_of_a_quadratic_match_numpy_eigh(method):
    rng = np.random.default_rng(8)
    q = np.linalg.qr(rng.standard_normal((40, 40)))[0]
    a = q @ np.diag(np.linspace(-2.0, 10.0, 40)) @ q.T
    values, vectors = D.hessian_eigen(Quadratic(a), rng.standard_normal(40), k=3, method=method)
    want_values, want_vectors = np.linalg.eigh(a)
    np.testing.assert_allclose(values, want_values[::-1][:3], rtol=1e-8)
    overlaps = np.abs(np.sum(vectors * want_vectors[:, ::-1][:, :3].T, axis=1))
    np.testing.assert_allclose(overlaps, 1.0, atol=1e-8)


def test_hessian_vector_products_of_a_network_match_torch_autograd():
    target = landscapes.make(
        "mlp", hidden_sizes=(3,), dataset="two-clusters", n=200, device="cpu", dtype="float64"
    )
    theta = target.initial(torch.Generator().manual_seed(1), 1)[0]
    hessian = torch.autograd.functional.hessian(lambda w: target.loss(w[None])[0], theta)
    v = torch.randn(4, target.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(D.hvp(target, theta, v), v @ hessian.T, rtol=1e-10, atol=1e-12)


def banana_run(home, **spec) -> str:
    spec = {
        "target": {"name": "banana"},
        "sampler": {"name": "mala", "params": {"step_size": 0.1}},
        "chains": 6,
        "steps": 600,
        "burn_in": 100,
        **spec,
    }
    store = Store(home)
    run_id = store.create(parse_spec(spec).model_dump(mode="json"))
    execute(parse_spec(spec), store, run_id)
    return run_id


def surface_json(monkeypatch, capsys, home, *args) -> tuple[int, dict | str]:
    monkeypatch.setenv("BASIN_HOME", str(home))
    code = main(["surface", *args])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 and "--json" in args else out.err)


def test_cli_surface_of_a_potential_run(tmp_path, monkeypatch, capsys):
    run_id = banana_run(tmp_path)
    path = tmp_path / "s.npz"
    code, facts = surface_json(
        monkeypatch,
        capsys,
        tmp_path,
        run_id,
        "--grid",
        "21",
        "--range",
        "3",
        "--out",
        str(path),
        "--json",
    )
    assert code == 0
    assert facts["centre_loss"] == pytest.approx(facts["reference_loss"], rel=1e-12)
    assert facts["grid_min"] <= facts["centre_loss"] <= facts["grid_max"]
    ratio = facts["explained_variance_ratio"]
    assert len(ratio) == 2 and ratio[0] >= ratio[1] > 0 and sum(ratio) == pytest.approx(1.0)
    assert facts["reference"] == "best" and facts["source"] == "records"
    s = np.load(path)
    assert s["loss"].shape == (21, 21) and s["c0"].shape == (21,) and s["c0"][-1] == 3.0
    chains, points, _ = s["path"].shape
    assert (
        chains == 6
        and s["path_loss"].shape == (chains, points)
        and s["path_step"].shape == (points,)
    )
    # the path's coordinates are the recorded positions' projections, its loss their true loss
    store = Store(tmp_path)
    positions = store.read(run_id)["position"]  # [draws, chains, 2]
    steps = list(store.read(run_id)["step"])
    last = positions[steps.index(int(s["path_step"][-1])), 0]
    v, theta = s["directions"], s["theta"]
    assert s["path"][0, -1] == pytest.approx(v @ (last - theta), abs=1e-6)  # orthonormal PCs
    banana = landscapes.make("banana", device="cpu", dtype="float64")
    assert s["path_loss"][0, -1] == pytest.approx(
        float(banana.loss(torch.from_numpy(last.astype(np.float64))[None])[0]), rel=1e-10
    )
    # the best reference point is the lowest path point: nothing on the path is lower
    assert facts["reference_loss"] == pytest.approx(np.nanmin(s["path_loss"]))
    # Hessian directions of a 2-D potential: its two eigenvectors, orthonormal
    code, facts = surface_json(
        monkeypatch, capsys, tmp_path, run_id, "--directions", "hessian", "--grid", "5", "--json"
    )
    assert (
        code == 0
        and facts["directions"] == "hessian"
        and facts["direction_values"][0] >= facts["direction_values"][1]
    )


def test_cli_surface_of_an_llc_network_run_uses_its_snapshots_and_w0(tmp_path):
    run = cli(
        tmp_path,
        "run",
        *("--target", "mlp", "--target-param", "hidden_sizes=[8]", "--sampler", "sgld"),
        *("--param", "step_size=1e-4", "--param", "batch_size=64", "--chains", "3"),
        *("--steps", "300", "--observe", "llc", "--train-steps", "300", "--json"),
    )
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    out = cli(
        tmp_path,
        "surface",
        run_id,
        "--components",
        "1,5",
        "--grid",
        "11",
        "--out",
        str(tmp_path / "m.npz"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["source"] == "snapshots" and facts["reference"] == "w0"
    w0 = Store(tmp_path).get_array(run_id, "w0")
    target = landscapes.make("mlp", hidden_sizes=(8,), device="cpu", dtype="float64")
    w0_loss = float(target.full_loss(torch.from_numpy(w0.astype(np.float64))[None])[0])
    assert facts["reference_loss"] == pytest.approx(w0_loss, rel=1e-12)
    assert facts["centre_loss"] == pytest.approx(w0_loss, rel=1e-12)
    assert facts["components"] == [1, 5] and facts["label1"].startswith("PC5")
    ratio = np.array(facts["explained_variance_ratio"])
    assert np.all(np.diff(ratio) <= 0) and 0 < ratio.sum() <= 1 + 1e-9
    s = np.load(tmp_path / "m.npz")
    assert s["path"].shape[0] == 3 and s["directions"].shape == (2, target.dim)
    # the range was chosen as the smallest 10^i domain holding the path
    extent = np.abs(s["path"]).max()
    assert extent * 1.1 <= facts["range"] < 10 * extent * 1.1


def test_bad_surface_requests_exit_2_naming_the_field(tmp_path, monkeypatch, capsys):
    run_id = banana_run(tmp_path, steps=50, burn_in=0, chains=2)
    for args, field in [
        (["--grid", "40"], "grid"),
        (["--range", "-1"], "range"),
        (["--components", "1,1"], "components"),
        (["--components", "1,3"], "components"),  # a 2-D run has two principal components
        (["--components", "a,b"], "components"),
        (["--reference", "w0"], "reference"),  # banana has no w0
        (["--every", "0"], "every"),
    ]:
        code, err = surface_json(monkeypatch, capsys, tmp_path, run_id, *args)
        assert code == 2 and f"{field}:" in err, (args, err)
    code, err = surface_json(monkeypatch, capsys, tmp_path, "no-such-run")
    assert code == 2 and "no-such-run" in err


def test_diverged_chains_and_overflowing_grid_points_are_contained():
    target = landscapes.make("funnel", device="cpu", dtype="float64")
    rng = np.random.default_rng(9)
    traj = rng.standard_normal((3, 40, target.dim))
    traj[1, 20:] = np.nan  # a chain that diverged half way
    out = S.surface(target, traj, grid=11, half_width=1e4, reference="mean")
    assert out["diverged_chains"] == 1 and out["path"].shape[0] == 2
    assert 0 < out["nonfinite"] < 121  # exp(-v) overflows far out; the rest of the grid stands
    assert math.isfinite(out["centre_loss"]) and math.isfinite(out["grid_min"])
    with pytest.raises(ParamError, match="trajectory"):
        S.surface(target, np.full((2, 5, target.dim), np.nan))


def run_with_a_diverged_chain(home) -> tuple[str, np.ndarray]:
    """A stored 3-chain banana run whose chain 1 diverged at draw 40 and, as the sampler does,
    stayed frozen where it was: finite, but far out (1e30). Returns its id and positions."""
    store = Store(home)
    spec = {"target": {"name": "banana"}, "sampler": {"name": "sgld"}, "chains": 3, "steps": 60}
    run_id = store.create(parse_spec(spec).model_dump(mode="json"))
    rng = np.random.default_rng(4)
    position = rng.standard_normal((60, 3, 2)).astype(np.float32)
    diverged = np.zeros((60, 3), bool)
    position[40:, 1], diverged[40:, 1] = 1e30, True
    loss = np.where(diverged, np.nan, 1.0).astype(np.float32)
    records = {"step": np.arange(60), "position": position, "loss": loss, "diverged": diverged}
    store.append(run_id, 0, records)
    store.finish(store.claim(1, run_id).id, "completed")
    return run_id, position


def test_a_stored_runs_diverged_chains_stay_out_of_its_surface(tmp_path):
    from studies import surface as surfaces

    run_id, position = run_with_a_diverged_chain(tmp_path)
    out = surfaces.compute(Store(tmp_path), run_id, grid=5, reference="mean", burn_in=0)
    assert out["diverged_chains"] == 1 and out["path"].shape[0] == 2
    # the surface of the two healthy chains alone: the same axes, range and grid
    kept = np.swapaxes(position[:, [0, 2]], 0, 1)
    target = landscapes.make("banana", device="cpu", dtype="float64")
    alone = S.surface(target, kept, np.arange(60), grid=5, reference="mean", burn_in=0)
    assert out["range"] == alone["range"] == 10.0
    np.testing.assert_allclose(out["explained_variance_ratio"], alone["explained_variance_ratio"])
    np.testing.assert_allclose(out["loss"], alone["loss"])


@pytest.mark.parametrize("name", sorted(landscapes.REGISTRY))
def test_every_target_gets_a_surface_centred_on_its_reference(name):
    # a user's model: a small one (the default digits MLP's 9,610 parameters took 5-17 s here)
    small = {"factory": "tests/model_factories.py:small_classifier"} if name == "model" else {}
    target = landscapes.make(name, device="cpu", dtype="float64", **small)
    g = torch.Generator().manual_seed(0)
    start = target.initial(g, 2).numpy()
    steps = np.random.default_rng(0).standard_normal((2, 6, target.dim))
    traj = start[:, None, :] + 0.01 * np.cumsum(steps, axis=1)
    if target.dim < 2:
        with pytest.raises(ParamError, match="d >= 2"):
            S.surface(target, traj)
        return
    for directions in ("pca", "random"):
        out = S.surface(target, traj, directions=directions, grid=3, reference="last")
        assert out["centre_loss"] == pytest.approx(out["reference_loss"], rel=1e-12)
        assert np.isfinite(out["reference_loss"]) and out["loss"].shape == (3, 3)
        theta = torch.from_numpy(traj[0, -1])[None]
        assert out["reference_loss"] == pytest.approx(float(target.full_loss(theta)[0]), rel=1e-12)
