"""The commands that compute in this process: ``surface`` (the loss surface around a run's
trajectory, ``studies.surface``) and ``wide`` (Hron et al. 2022: the KL from prior draws and
posterior slices, ``studies.wide``)."""

from __future__ import annotations

import argparse
import json

from cli.common import out_path, write
from runs.jsonsafe import json_safe
from runs.spec import SpecError
from runs.store import Store
from studies.arguments import integers


def cmd_surface(args: argparse.Namespace, store: Store) -> int:
    from studies import surface

    options = {
        "directions": args.directions,
        "components": args.components.split(","),
        "grid": args.grid,
        "half_width": args.range,
        "reference": args.reference,
        "every": args.every,
        "path_chains": args.path_chains,
        "seed": args.seed,
        "normalisation": args.normalisation,
    }
    if args.burn_in is not None:
        options["burn_in"] = args.burn_in
    surface.check_range(args.range, "--range")
    path = out_path(args.out) if args.out else None  # before the surface is computed
    out = surface.compute(store, args.id, device=args.device, dtype=args.dtype, **options)
    if path:
        write(path, lambda p: surface.save(out, p))
    facts = surface.summary(out)
    if args.out:
        facts["out"] = str(args.out)
    if args.json:
        print(json.dumps(json_safe(facts)))
        return 0
    print(f"{facts['label0']} x {facts['label1']} around the {facts['reference']} point")
    print(
        f"grid {facts['grid']}x{facts['grid']} on [-{facts['range']:g}, {facts['range']:g}]^2: "
        f"loss {facts['grid_min']:.6g} .. {facts['grid_max']:.6g}, "
        f"centre {facts['centre_loss']:.6g}, {facts['nonfinite']} non-finite points"
    )
    if args.out:
        print(f"wrote {args.out}")
    return 0


def cmd_wide(args: argparse.Namespace, store: Store) -> int:
    """The two in-process studies of wide networks (Hron et al. 2022): the KL from prior draws by
    width, and posterior slices through a run's last draw in theta and in phi (what the Wide
    networks page shows)."""
    import numpy as np

    from landscapes import ParamError
    from runs.worker import torch_threads
    from studies import wide

    if args.study == "kl":
        widths = integers(args.widths, "--widths")
        wide.check_kl(args.draws, args.seed, args.depth, "--")  # before any width is built
        with torch_threads(1):  # n x n factorisations: one thread (docs/methods/wide-networks.md)
            try:
                rows = wide.kl_table(widths, args.depth, args.n, args.draws, args.data, args.seed)
            except ParamError as exc:
                raise SpecError(exc.field, str(exc).split(": ", 1)[-1]) from None
        if args.json:
            print(json.dumps(json_safe({"rows": rows})))
            return 0
        for r in rows:
            print(
                f"width {r['width']:<6} KL(q || p_phi) {r['reprior']:<10.4g} "
                f"KL(q || p_theta) {r['standard']:<10.4g} sd(log Z) {r['log_z_std']:.3g}"
            )
        return 0
    path = out_path(args.out) if args.out else None
    with torch_threads(1):
        out = wide.slices(store, args.id, args.grid, args.range, args.seed)
    if path:
        write(path, lambda p: np.savez(p, **{k: np.asarray(v) for k, v in out.items()}))
    facts = {
        "run_id": args.id,
        "width": out["width"],
        "parametrisation": out["parametrisation"],
        "grid": out["grid"],
        "range": out["half_width"],
        **{f"{k}_max": float(np.nanmax(out[k])) for k in ("theta", "phi")},
        "out": args.out,
    }
    if args.json:
        print(json.dumps(json_safe(facts)))
        return 0
    print(
        f"{args.id} (width {out['width']}, {out['parametrisation']}): -log p on a "
        f"{out['grid']}x{out['grid']} plane of half-width {out['half_width']:g} rises by up to "
        f"{facts['theta_max']:.4g} in theta and {facts['phi_max']:.4g} in phi"
    )
    if args.out:
        print(f"wrote {args.out}")
    return 0


def add_parsers(sub) -> None:
    """surface, and wide with its kl and slices."""
    surf = sub.add_parser("surface", help="the loss surface around a run's trajectory (TATi)")
    surf.add_argument("id")
    surf.add_argument("--directions", choices=("pca", "random", "hessian"), default="pca")
    surf.add_argument("--components", default="1,2", help="1-based pair, e.g. 1,2 or 1,64")
    surf.add_argument("--grid", type=int, default=41, help="odd points per axis")
    surf.add_argument(
        "--range",
        type=float,
        help="half-width R of [-R, R]^2 (default: the smallest 10^i that "
        "holds the projected trajectory)",
    )
    surf.add_argument(
        "--reference",
        choices=("auto", "w0", "mean", "last", "best"),
        default="auto",
        help="theta*: the run's w0 when it has one, else the trajectory's lowest-loss point",
    )
    surf.add_argument("--every", type=int, help="overlay every k-th recorded draw")
    surf.add_argument("--path-chains", dest="path_chains", type=int, default=8)
    surf.add_argument("--burn-in", dest="burn_in", type=int, help="draws left out of the PCA")
    surf.add_argument("--normalisation", choices=("auto", "filter", "unit"), default="auto")
    surf.add_argument("--seed", type=int, default=0, help="random directions' seed")
    surf.add_argument("--device", default="auto")
    surf.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    surf.add_argument("--out", help="write the arrays to this .npz")
    surf.add_argument("--json", action="store_true")
    wide_parser = sub.add_parser(
        "wide", help="wide networks (Hron et al. 2022): KL from prior draws, posterior slices"
    )
    kinds = wide_parser.add_subparsers(dest="study", required=True)
    kl = kinds.add_parser("kl", help="KL(q || p) in phi and in theta by width, prior draws")
    kl.add_argument("--widths", default="8,32,128,512")
    kl.add_argument("--depth", type=int, default=1)
    kl.add_argument("--n", type=int, default=32)
    kl.add_argument("--draws", type=int, default=1000, help="prior draws")
    kl.add_argument("--data", choices=("synthetic", "digits"), default="synthetic")
    kl.add_argument("--seed", type=int, default=0)
    kl.add_argument("--json", action="store_true")
    sl = kinds.add_parser("slices", help="-log p through an ntk-fcn run's draw, theta and phi")
    sl.add_argument("id")
    sl.add_argument("--grid", type=int, default=41, help="odd points per axis")
    sl.add_argument("--range", type=float, default=1.0, help="half-width of the square")
    sl.add_argument("--seed", type=int, default=0, help="the random plane's seed")
    sl.add_argument("--out", help="write the arrays to this .npz")
    sl.add_argument("--json", action="store_true")
    surf.set_defaults(handler=cmd_surface)
    wide_parser.set_defaults(handler=cmd_wide)
