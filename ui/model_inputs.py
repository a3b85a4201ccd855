"""The model target's widgets on the Networks page: a factory the operator put in BASIN_MODELS
(listed, never uploaded) and a weights-only checkpoint (uploaded, checked against the module,
kept in the store's home)."""

from __future__ import annotations

import math
import os

import streamlit as st

from landscapes import ParamError

from . import models  # by module: a test lowers models.MAX_CHECKPOINT_BYTES
from .pool import store
from .widgets import DONE, WARNING, kept, plain, spec_error

OWN_WEIGHTS = ""  # the checkpoint choice "the module's own weights" (no checkpoint)


def factory_label(ref: str) -> str:
    where, _, attr = ref.rpartition(":")
    directory = models.models_dir()
    if where.endswith(".py") and directory is not None and where.startswith(f"{directory}/"):
        return f"{where.removeprefix(f'{directory}/')}:{attr}"
    return ref


def checkpoint_label(path: str, home) -> str:
    if path == OWN_WEIGHTS:
        return "the module's own weights (as the factory builds it)"
    directory = models.models_dir()
    if str(path).startswith(f"{models.checkpoint_root(home)}/"):
        return f"{os.path.basename(path)} (uploaded)"
    if directory is not None and str(path).startswith(f"{directory}/"):
        return f"{path.removeprefix(f'{directory}/')} (in BASIN_MODELS)"
    return path


def upload_checkpoint(factory: str, choice_key: str) -> None:
    """The uploader: a new file is checked once (``models.accept_checkpoint``) and, kept,
    becomes the checkpoint chosen; its outcome shows while the file stays in the uploader."""
    cap = models.MAX_CHECKPOINT_BYTES
    upload = st.file_uploader(
        "Upload a checkpoint (weights only)",
        type=list(models.UPLOAD_TYPES),
        key="net.model.upload",
        max_upload_size=max(1, math.ceil(cap / 2**20)),
        help=f"A state dict saved with torch.save (read weights-only: a pickle that would run "
        f"code is refused) or .safetensors, at most {models.size_text(cap)}. It is checked "
        "against the factory's module (every tensor's name and shape) before it is kept.",
    )
    if upload is None:
        return
    outcomes = st.session_state.setdefault("net.model.uploads", {})
    key = f"{upload.file_id}:{factory}"
    if key not in outcomes:
        try:
            path = models.accept_checkpoint(upload.getvalue(), upload.name, factory, store().home)
        except ParamError as exc:
            outcomes[key] = ("refused", exc.field, str(exc).removeprefix(f"{exc.field}: "))
        else:
            outcomes[key] = ("kept", path)
            st.session_state[choice_key] = path
            chosen = f"ckpt.chosen.{factory}"  # the LLC over training's choice takes it too
            if chosen in st.session_state and path not in st.session_state[chosen]:
                st.session_state[chosen] = models.by_step([*st.session_state[chosen], path])
    outcome = outcomes[key]
    if outcome[0] == "kept":
        st.success(
            f"Kept {plain(os.path.basename(outcome[1]))}: weights only, and every tensor "
            "matches the module's.",
            icon=DONE,
        )
    else:
        spec_error(ParamError(outcome[1], outcome[2] + "; nothing was kept or queued"))


def model_inputs(spec) -> dict | None:
    """The model target's params: a listed factory and a checkpoint (or the module's own
    weights); None after showing what is wrong."""
    offered, skipped = models.listing()
    directory = models.models_dir()
    if skipped:  # one line a file that could not be listed: the others are still offered
        st.warning("  \n".join(plain(line) for line in skipped), icon=WARNING)
    if directory is None:
        st.caption(
            "Factories: the bundled example only. To offer your own, start the app with "
            "`BASIN_MODELS=/path/to/dir`: every top-level `make` or `make_*` function of the "
            "`.py` files in it is listed (found by parsing, not importing), and checkpoint files "
            "under it (.pt, .pth, .safetensors) are offered below. Uploaded code is never run."
        )
    if not offered:
        st.error(
            f"**model.factory**: no `make` or `make_*` function in the .py files of "
            f"{plain(str(directory))} (BASIN_MODELS)",
            icon=WARNING,
        )
        return None
    if st.session_state.get("net.model.factory") not in offered:  # gone, or now a link out
        st.session_state.pop("net.model.factory", None)
    factory = st.selectbox(
        "factory",
        offered,
        format_func=factory_label,
        key=kept("net.model.factory"),
        help="A function of no arguments returning (module, (inputs, targets), loss).",
    )
    choice_key = kept(f"net.model.checkpoint.{factory}")
    upload_checkpoint(factory, choice_key)
    choices = [OWN_WEIGHTS, *models.checkpoint_choices(store().home, factory)]
    if st.session_state.get(choice_key) not in choices:
        st.session_state.pop(choice_key, None)
    checkpoint = st.selectbox(
        "checkpoint (w0)",
        choices,
        format_func=lambda p: checkpoint_label(p, store().home),
        key=choice_key,
        help="The weights the chains start from and are localised at: the LLC is measured there.",
    )
    try:
        return spec.validate({"factory": factory, "checkpoint": checkpoint or None})
    except ParamError as exc:
        spec_error(exc)
        return None


def loss_caption(name: str, params: dict, facts: dict) -> None:
    """The loss in words under the network: the convention chosen for a regression network,
    the factory's loss and what eval mode does for a model."""
    if name == "model":
        try:
            described = models.describe_model(params["factory"])
        except ParamError:
            return  # said above, under the facts
        # the loss function's and module classes' names are the user's: shown as typed
        st.caption(f"{plain(described['loss'])}. Modes: {plain(described['modes'])}.")
    elif "loss_convention" in params:
        task = "classification" if facts.get("classes") else "regression"
        st.caption(models.loss_text(task, params["loss_convention"]))
