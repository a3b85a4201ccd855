"""The sweep tab every page that runs a sweep shares: where its runs go (the local worker pool
or a Ray cluster), its Run button, the page's sweeps of one kind to pick from, the one picked
drawn live as its cells fill in, and a button that deletes it with its runs."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from landscapes import ParamError
from runs.spec import SpecError
from studies import registry, sweeps

from .live import delete_button, stop_polling, sweep_progress, watch
from .pool import ensure_pool, store
from .widgets import WARNING, kept, spec_error

FIX_FIRST = "Fix the fields marked above first; nothing was queued."
RAY_INSTALLED = importlib.util.find_spec("ray") is not None


def backend_choice(key: str) -> tuple[str, str | None]:
    """Where a sweep's runs go: the local worker pool, or a Ray cluster at an address (offered
    when Ray is installed: requirements-ray.txt)."""
    if not RAY_INSTALLED:
        st.caption(
            "Runs go to the local worker pool (`pip install -r requirements-ray.txt` "
            "offers a Ray cluster too)."
        )
        return "local", None
    left, right = st.columns([1, 2])
    with left:
        backend = st.radio(
            "Run on",
            ("local", "ray"),
            horizontal=True,
            key=kept(f"{key}.backend"),
            format_func={"local": "local worker pool", "ray": "Ray cluster"}.get,
            help="A Ray cluster runs each cell as a Ray task; its records stream back into this "
            "store, so the sweep fills in here as a local one does (README: Scale out).",
        )
    address = None
    if backend == "ray":
        with right:
            address = (
                st.text_input(
                    "Ray address",
                    "auto",
                    key=kept(f"{key}.address"),
                    help="auto: the cluster this machine runs (or RAY_ADDRESS); host:port of "
                    "a head; ray://host:port for Ray Client",
                ).strip()
                or "auto"
            )
    return backend, address


def submit_sweep(kind: str, params: dict, cells: list, backend: str, address: str | None) -> str:
    """Queue a sweep's runs (every one checked first) on the local pool, or held for a Ray
    driver started beside the app (it outlives the page, as the pool does)."""
    held = os.getpid() if backend == "ray" else None
    sweep_id = sweeps.submit(store(), kind, params, cells, held_by=held)
    if backend == "ray":
        from runs.ray_backend import start_driver  # Ray is imported only when it is asked for

        start_driver(store(), sweep_id, address)
    else:
        ensure_pool()
    return sweep_id


@dataclass(frozen=True)
class SweepTab:
    """A page's sweeps of one kind: the words its tab says and how the page draws one sweep's
    results. ``show`` draws the tab; the page keeps its own widgets and figures."""

    kind: str  # the sweep kind in the store: "dln", "order", "reprior", "calibrate", ...
    prefix: str  # its widgets' keys: {prefix}.backend, .address, .shown, .polling, .delete
    button: str  # the Run button's label ...
    button_key: str  # ... and its key
    picker: str  # the label of the selectbox that picks one sweep
    label: Callable[[dict], str]  # a sweep, as that selectbox lists it
    empty: str  # said when there is no sweep of this kind yet
    delete: str  # the label of the button that deletes the sweep picked and its runs
    draw: Callable[[dict, dict], None]  # (sweep, its study's results) -> the page's figures
    noun: str = "sweep"  # what the page calls one: "This {noun} was deleted."
    every: float = 2.0  # seconds between redraws while its runs go on

    def show(
        self,
        build: Callable[[], tuple[dict, list]],
        blocked: str | None = None,
        *,
        disabled: bool = False,
        spinner: str | None = None,
        listing: Callable[[list[dict]], None] | None = None,
    ) -> str | None:
        """The backend choice and the Run button, which queues ``build()``'s (params, cells)
        unless ``blocked`` says why not (an error under the button then; its fields say more
        above it); ``listing(sweeps)`` drawn above the picker (the page's table of them); then
        the sweep picked, redrawn every ``every`` s until its runs have ended. Returns its id
        (None when there is none)."""
        backend, address = backend_choice(self.prefix)
        if st.button(self.button, type="primary", key=self.button_key, disabled=disabled):
            self.launch(build, blocked, backend, address, spinner)
        found = [s for s in store().list_sweeps() if s["kind"] == self.kind]
        if listing:
            listing(found)
        by_id = {s["id"]: s for s in found}
        shown, _ = watch(
            self.prefix,
            self.picker,
            {i: self.label(s) for i, s in by_id.items()},
            self.empty,
            self.live,
            lambda i: sweeps.sweep_done(store(), by_id[i]),
            self.every,
            aside=delete_button(self.delete, f"{self.prefix}.delete", store().delete_sweep),
        )
        return shown

    def launch(self, build, blocked: str | None, backend: str, address: str | None, spinner):
        """Run clicked: queue the sweep and pick it, or say why nothing was queued."""
        if blocked:
            st.error(blocked, icon=WARNING)
            return
        try:
            with st.spinner(spinner) if spinner else contextlib.nullcontext():
                params, cells = build()
                sweep_id = submit_sweep(self.kind, params, cells, backend, address)
        except (SpecError, ParamError) as exc:
            spec_error(exc)
        else:
            st.session_state[f"{self.prefix}.shown"] = sweep_id

    def live(self, sweep_id: str) -> None:
        """One sweep as its cells fill in: its progress, then the page's ``draw``."""
        s = store()
        try:
            sweep = s.get_sweep(sweep_id)
        except KeyError:
            st.info(f"This {self.noun} was deleted.")
            return
        result = registry.BY_KIND[sweep["kind"]].results(s, sweep)
        progress = result["progress"]
        stop_polling(f"{self.prefix}.polling", sweep_id, progress["done"] == progress["runs"])
        sweep_progress(progress)
        self.draw(sweep, result)
