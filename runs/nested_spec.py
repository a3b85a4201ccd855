"""The ``nested`` run kind's options (``RunSpec.nested``, ``--nested-param K=V``) and its target
check: what ``runs.spec`` needs of nested sampling (``samplers.nested``) to validate a nested run
up front, derived from the sampler's ``PARAMS`` and ``SPEC`` (declared there once)."""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

import landscapes
from landscapes import ParamError, Target
from samplers.nested import PARAMS, SPEC


class Options(BaseModel):
    """A nested run's settings: ``PARAMS``, declared and checked once, by ``SPEC`` (the model
    holds them as its extra fields, so nothing is typed twice). A bad one is the spec error
    "nested.<name>: ..." (``runs.spec`` reads pydantic errors of type "spec" as it does its own)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _settings(cls, data: Any) -> Any:
        if isinstance(data, Options):
            return data.model_dump()
        if not isinstance(data, dict):
            got = type(data).__name__
            raise PydanticCustomError(
                "spec",
                "{field}: {message}",
                {
                    "field": "nested",
                    "message": f"must be an object with keys {[p.name for p in PARAMS]}, got {got}",
                },
            )
        try:
            return SPEC.validate(data)
        except ParamError as exc:
            field = "nested." + exc.field.removeprefix("nested.")
            message = str(exc).removeprefix(f"{exc.field}: ")
            raise PydanticCustomError(
                "spec", "{field}: {message}", {"field": field, "message": message}
            ) from None


# RunSpec's ``nested`` field: None, or the Options (its flag's help names PARAMS).
FIELD = Field(
    None,
    json_schema_extra={
        "cli": {"help": "a nested run's option: " + ", ".join(p.name for p in PARAMS)}
    },
)


def box_error(name: str, params: dict) -> str | None:
    """Why target ``name`` with its validated ``params`` cannot be nested sampling's (it needs a
    potential with a box over every coordinate: its uniform prior); None when it can."""
    spec = landscapes.REGISTRY[name]
    if spec.kind != "potential":
        return (
            f"must be a potential with a box (nested sampling's uniform prior); {name} is a "
            f"{spec.kind}, which has none"
        )
    try:
        target = _built(name, json.dumps(params, sort_keys=True))
    except ParamError as exc:
        return str(exc)
    if target.bounds is None or len(target.bounds) != target.dim:
        return (
            f"must be a potential with a box over all its coordinates (nested sampling's "
            f"uniform prior: its plotted bounds); {name} with d = {target.dim} has bounds for "
            f"{0 if target.bounds is None else len(target.bounds)}"
            + (" (take dim = 2)" if "dim" in params else "")
        )
    return None


def boxed(name: str, params: dict, options: Options | None) -> Options:
    """``options`` (their defaults when None) of a nested run on target ``name``; the spec error
    "target: ..." when ``box_error`` finds the target has no box."""
    if (why := box_error(name, params)) is not None:
        raise PydanticCustomError("spec", "{field}: {message}", {"field": "target", "message": why})
    return options or Options()


@functools.lru_cache(maxsize=32)
def _built(name: str, params_json: str) -> Target:
    return landscapes.make(name, **json.loads(params_json))
