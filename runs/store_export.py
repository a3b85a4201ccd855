"""Exports of a run's records (``Exports``, a part of ``runs.store.Store``): .npz and NetCDF in
ArviZ's layout (an xarray DataTree with groups posterior, sample_stats and constant_data, the
layout legacy ArviZ called InferenceData), written to a temporary file and renamed onto their
target."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import numpy as np

from runs.store_db import CorruptRecords


class Exports:
    """The Store's exports (``read`` and ``get_array`` are the Store's own)."""

    def _export(
        self, run_id: str, burn_in: int, thin: int, damaged: list | None
    ) -> dict[str, np.ndarray]:
        """Records after burn-in, every thin-th, chain-major ([chains, draws, ...]); 1-D stay.
        Damaged chunks raise CorruptRecords, or are left out and listed in ``damaged``."""
        if burn_in < 0 or thin < 1:
            raise ValueError(f"need burn_in >= 0 and thin >= 1, got {burn_in}, {thin}")
        data, bad = self._read(run_id, burn_in, None, "records")
        if bad and damaged is None:
            raise CorruptRecords(run_id, bad)
        if bad:
            damaged.extend(bad)
        data = {name: a[::thin] for name, a in data.items()}
        return {name: np.swapaxes(a, 0, 1) if a.ndim > 1 else a for name, a in data.items()}

    def export_npz(
        self, run_id: str, path, burn_in: int = 0, thin: int = 1, damaged: list | None = None
    ) -> Path:
        """The recorded arrays chain-major, e.g. position [chains, draws, d], step [draws]. A
        run with d > 64 records position [chains, draws, k], its positions' coordinates on the
        orthonormal columns of ``projection`` [d, k], which the file holds too. With a list as
        ``damaged``, damaged chunks are left out and their (first, last, why) appended to it."""
        _writable(path)
        arrays = self._export(run_id, burn_in, thin, damaged)
        basis = self.get_array(run_id, "projection")
        if basis is not None:
            arrays["projection"] = basis

        def write(temp: Path) -> None:
            with open(temp, "wb") as f:  # a file object: np.savez must not append ".npz"
                np.savez(f, **arrays)

        return replace_file(path, write)

    def export_netcdf(
        self, run_id: str, path, burn_in: int = 0, thin: int = 1, damaged: list | None = None
    ) -> Path:
        """NetCDF-4 (HDF5) file of an ArviZ DataTree: position in posterior, per-chain
        statistics in sample_stats, the projection basis (d > 64) in constant_data; ``damaged``
        as for ``export_npz``. ``xarray.open_datatree(path)`` or, with the legacy ``arviz``
        0.x package, ``arviz.from_netcdf(path)`` opens it."""
        import arviz_base  # heavy (xarray); only exports need it

        _writable(path)
        data = self._export(run_id, burn_in, thin, damaged)
        step = data.pop("step", None)
        per_chain = {k: v for k, v in data.items() if v.ndim > 1}
        posterior = {"position": per_chain.pop("position")} if "position" in per_chain else {}
        basis = self.get_array(run_id, "projection")  # d > 64: projected coordinates
        axis = "dim" if basis is None else "projected_dim"
        coords, dims, constant = {}, {}, {}
        if posterior:
            coords[axis] = np.arange(posterior["position"].shape[2])
            dims["position"] = [axis]
        if basis is not None:
            constant["projection"] = basis
            coords["param"] = np.arange(basis.shape[0])
            dims["projection"] = ["param", axis]
        if step is not None:
            coords["draw"] = step
        groups = {"posterior": posterior, "sample_stats": per_chain, "constant_data": constant}
        groups = {name: group for name, group in groups.items() if group}  # as legacy ArviZ
        # arviz_base.from_dict has this signature in arviz-base 0.8 and 1.x. Its convention check
        # only warns when a run has more chains than draws, which short runs have on purpose.
        tree = arviz_base.from_dict(groups, coords=coords, dims=dims, check_conventions=False)
        return replace_file(path, lambda temp: write_datatree(tree, temp))


def write_datatree(tree, path) -> None:
    """A DataTree to a NetCDF-4 file, as legacy ArviZ wrote InferenceData: the h5netcdf engine
    (groups need NetCDF-4, which xarray's built-in scipy engine cannot write) and zlib on every
    numeric variable."""
    encoding = {
        node.path: {
            name: {"zlib": True}
            for name, var in node.dataset.variables.items()
            if var.dtype.kind in "biufc"
        }
        for node in tree.subtree
    }
    tree.to_netcdf(str(path), engine="h5netcdf", encoding=encoding)


def _writable(path) -> None:
    """An export replaces its target by a rename, which a pipe or a device cannot take."""
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise ValueError(
            f"cannot export to {path}: not a regular file (a pipe, device or folder); an export "
            "is written to a temporary file beside its target and renamed onto it"
        )


def replace_file(path, write) -> Path:
    """``write(temp)`` to a temporary file beside ``path``, then renamed onto it: a process
    killed midway leaves the old file whole (the temporary one is removed on any error)."""
    target = Path(os.path.realpath(path))  # through a symlink: its file is replaced, not it
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        write(temp)
        with open(temp, "rb+") as f:
            os.fsync(f.fileno())  # the bytes on disk before the name points at them
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return Path(path)
