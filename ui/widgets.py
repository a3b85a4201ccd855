"""Widgets generated from registry parameter specs (``landscapes.Param``), so adding a target or
a sampler adds its controls everywhere. Bad values are shown inline, naming the field and the
allowed range, and never reach a run."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args, get_origin

import streamlit as st

from landscapes import Param, ParamError, Spec
from runs.spec import LLCOptions

from .text import plain  # the one escaping helper; pages and ui modules import it from here too

LIST_HELP = "comma-separated, e.g. 1, 2"
# Alert icons from Streamlit's bundled icon font: emoji need an emoji font on the viewer's machine
WARNING, DONE = ":material/warning:", ":material/check_circle:"
# Step sizes in tables, on a log grid from 1e-8 up: 1E-8, 1E-7, 1E-6 (a plain column shows
# 0.00000001, and "%g" switches to fixed point at 1e-6)
STEP_COLUMN = st.column_config.NumberColumn(format="scientific")


KEPT = "ui.kept"  # the keys of the widgets whose values outlive a visit to another page


def kept(key: str) -> str:
    """``key``, for a value widget (not a button) whose value should outlive a visit to another
    page: Streamlit drops the state of every widget the run did not draw, so a page's setup
    came back at its defaults (``keep_values`` keeps them)."""
    st.session_state.setdefault(KEPT, set()).add(key)
    return key


def keep_values() -> None:
    """Re-save the kept widgets' values before the page runs (Streamlit's documented way to
    interrupt the clean-up, "Working with widgets in multipage apps", option 3)."""
    for key in st.session_state.get(KEPT, ()):
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def _label(p: Param) -> str:
    return f"{p.name} ({p.unit})" if p.unit else p.name


def _help(p: Param) -> str:
    return f"{p.doc}. Allowed: {p.allowed()}."


def _allowed(p: Param) -> str:
    """``p.allowed()``, with an int's bounds exact ({:g} shows 2**31 - 1 as 2.14748e+09)."""
    if p.kind == "int" and p.low is not None and p.high is not None:
        return f"an integer in [{int(p.low)}, {int(p.high)}]"
    return p.allowed()


def check_number(p: Param, text: str, owner: str = "") -> int | float:
    """``text`` as the number ``p`` takes, or a ParamError on ``owner.name`` (``name`` without
    an owner) that says what is allowed and what was typed (an empty field included)."""
    name = f"{owner}.{p.name}" if owner else p.name
    text = text.strip()
    if not text:
        raise ParamError(name, f"must be {_allowed(p)}; the field is empty")
    try:
        return p.check(text, owner or "-")
    except ParamError:
        raise ParamError(name, f"must be {_allowed(p)}, got {text!r}") from None


def number_field(
    p: Param, key: str, value: Any = None, owner: str = "", label: str | None = None, help=None
) -> int | float | None:
    """``p`` (an int or float, not optional) typed as text: the number ``check_number`` reads,
    or None after showing under the field the error that names it and its allowed range.

    Every number of a run is typed this way, not in st.number_input: a number typed outside
    its min/max there only turned the field red, with no text, and Run took the value before."""
    value = p.default if value is None else value
    shown = str(int(value)) if p.kind == "int" else f"{value:g}"
    help_ = help or f"{p.doc}. Allowed: {_allowed(p)}."
    text = st.text_input(label or _label(p), shown, key=key, help=help_)
    try:
        return check_number(p, text, owner)
    except ParamError as exc:
        spec_error(exc)
        return None


SHOWN = object()  # ``param_input``'s value for a number whose error is shown under its field


def param_input(p: Param, key: str, default: Any = None, owner: str = "") -> Any:
    """One widget for ``p``; returns the raw value (checked by ``param_inputs``), or a bounded
    int already checked (``number_field``; SHOWN when it was bad, its error shown)."""
    value = p.default if default is None else default
    label, help_ = _label(p), _help(p)
    if p.kind == "choice":
        return st.selectbox(label, p.choices, index=p.choices.index(value), key=key, help=help_)
    if p.kind == "bool":
        return st.checkbox(label, value=bool(value), key=key, help=help_)
    if p.kind == "int" and not p.optional and p.low is not None and p.high is not None:
        number = number_field(p, key, value, owner)
        return SHOWN if number is None else number
    if p.kind == "float" and not p.optional and value is not None:
        # Text, not a number_input: step sizes span 1e-8..1, which a spinner cannot edit.
        shown = value if value == "auto" else f"{value:g}"
        text = st.text_input(label, shown, key=key, help=help_)
        return text.strip()
    if p.kind in ("ints", "floats"):
        shown = "" if value is None else ", ".join(f"{v:g}" for v in value)
        text = st.text_input(label, shown, key=key, help=f"{help_} ({LIST_HELP})")
        return None if (p.optional and not text.strip()) else text
    shown = "" if value is None else str(value)
    text = st.text_input(
        label, shown, key=key, help=help_ + (" Empty: auto." if p.optional else "")
    )
    return None if (p.optional and not text.strip()) else text.strip()


def param_inputs(
    spec: Spec, key: str, skip: tuple[str, ...] = (), columns: int = 2, defaults: dict | None = None
) -> dict | None:
    """Widgets for every parameter of ``spec`` (except ``skip``), laid out in ``columns``;
    returns the validated values, or None after showing the first error inline."""
    params = [p for p in spec.params if p.name not in skip]
    cols = st.columns(columns) if params else []
    raw = {}
    for i, p in enumerate(params):
        with cols[i % columns]:
            default = (defaults or {}).get(p.name)
            raw[p.name] = param_input(p, kept(f"{key}.{spec.name}.{p.name}"), default, spec.name)
    try:
        checked = {
            name: spec.param(name).check(value, spec.name)
            for name, value in raw.items()
            if value is not SHOWN
        }
    except ParamError as exc:
        spec_error(exc)
        return None
    return None if any(value is SHOWN for value in raw.values()) else checked


def parse_grid(text: str, base: Param, name: str, length: int, owner: str) -> tuple | None:
    """A comma-separated list of 1..``length`` values, each within ``base``'s bounds (a sweep's
    step sizes, say), named ``owner.name`` in errors; None after showing the error inline."""
    grid = dataclasses.replace(base, name=name, kind="floats", optional=False, length=(1, length))
    try:
        return grid.check(text, owner)
    except ParamError as exc:
        spec_error(exc)
        return None


def spec_error(exc: Exception) -> None:
    """A RunSpec, budget or parameter error, inline: the field in bold, the message as plain
    text (it quotes what the user typed, which Markdown would render: '__import__' came out
    as a bold 'import'); a formula's caret lines below it, as code."""
    field = getattr(exc, "field", None)
    message = getattr(exc, "message", None) or str(exc).removeprefix(f"{field}: ")
    head, _, rest = message.partition("\n")
    st.error(f"**{field}**: {plain(head)}" if field else plain(head), icon=WARNING)
    if rest:
        st.code(rest, language=None)


def llc_option(name: str, key: str, default=None):
    """One LLCOptions field as a widget (``default``: instead of the field's): choices from its
    Literal, numbers as text (checked by the RunSpec on Run, which names the field)."""
    info = LLCOptions.model_fields[name]
    label = name.removeprefix("train_").replace("_", " ")
    if get_origin(info.annotation) is Literal:
        choices = list(get_args(info.annotation))
        index = choices.index(default or info.default)
        return st.selectbox(label, choices, index=index, key=key, help=info.description)
    shown = "" if info.default is None else f"{info.default:g}"
    help_ = (info.description or "") + (" Empty: auto." if info.default is None else "")
    return st.text_input(label, shown, key=key, help=help_ or None).strip() or None


def llc_inputs(key: str, target_name: str, truth: bool | None, w0: str | None) -> tuple[dict, bool]:
    """An LLC run's options (``LLCOptions``) as widgets under ``key``: where the chains start
    (default ``w0``) and the baseline, and the training to w0 in an expander where it trains.
    Returns (the options, whether w0 = truth was asked of a target without one: said inline)."""
    st.markdown("**Where the chains start (w0)**")
    c1, c2 = st.columns(2)
    with c1:
        w0 = llc_option("w0", f"{key}.w0", w0)
    with c2:
        baseline = llc_option("baseline", f"{key}.baseline")
    options = {"w0": w0, "baseline": baseline}
    if w0 in ("auto", "train"):
        with st.expander("Training to w0", expanded=False):
            t1, t2 = st.columns(2)
            train_fields = [f for f in LLCOptions.model_fields if f.startswith("train_")]
            for i, field in enumerate(train_fields):
                with (t1, t2)[i % 2]:
                    options[field] = llc_option(field, f"{key}.{field}")
    truth_error = w0 == "truth" and truth is False
    if truth_error:
        st.error(
            f"**llc.w0**: {target_name} has no known truth; use 'train' or 'init'", icon=WARNING
        )
    return options, truth_error
