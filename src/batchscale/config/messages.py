"""The config's validation errors as one line each: pydantic's first error turned into a `UserError` that names the
key, the rule and the fix. An unknown key names the valid key it most likely meant (`closest_key`): the same name in
another section (task.temperature -> sampling.temperature), else the closest name in its section or, failing that,
the closest dotted key anywhere (difflib's ratio, at its default cutoff of 0.6), else none but the list of valid keys.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel

from batchscale.errors import UserError


def _section_model(annotation) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _field_path(loc: tuple, root: type[BaseModel]) -> tuple:
    """The part of a pydantic error location that names config keys (drops union-member tags like 'literal[...]')."""
    model: type[BaseModel] | None = root
    path = []
    for part in loc:
        if model is None or part not in model.model_fields:
            if model is not None and len(path) == len(loc) - 1:
                path.append(part)  # an unknown key: keep it so the message names it
            break
        path.append(part)
        model = _section_model(model.model_fields[part].annotation)
    return tuple(path)


def _valid_keys(loc: tuple, root: type[BaseModel]) -> list[str]:
    model: type[BaseModel] = root
    for part in loc[:-1]:
        model = _section_model(model.model_fields[part].annotation)
        if model is None:
            return []
    return list(model.model_fields)


def closest_key(loc: tuple, root: type[BaseModel]) -> str | None:
    """The valid key an unknown one (at `loc`) most likely meant: a name in its own section, or a dotted key."""
    name, sections = str(loc[-1]), {key: _section_model(f.annotation) for key, f in root.model_fields.items()}
    if len(loc) == 2:
        elsewhere = [f"{key}.{name}" for key, model in sections.items() if model and name in model.model_fields]
        if elsewhere:
            return elsewhere[0]
    close = difflib.get_close_matches(name, _valid_keys(loc, root), n=1)
    if close:
        return close[0]
    dotted = [f"{key}.{leaf}" for key, model in sections.items() if model for leaf in model.model_fields]
    close = difflib.get_close_matches(".".join(map(str, loc)), dotted, n=1)
    return close[0] if close else None


def explain_validation_error(errors: list[dict], root: type[BaseModel]) -> UserError:
    """Turn the first pydantic error (all of them, for a union field) into a one-line UserError with a fix."""
    err = errors[0]
    loc, kind, ctx = _field_path(tuple(err["loc"]), root), err["type"], err.get("ctx", {})
    field = ".".join(str(p) for p in loc)
    if kind == "extra_forbidden":
        close = closest_key(loc, root)
        hint = f"did you mean '{close}'? " if close else ""
        return UserError(field, "unknown key", f"{hint}valid keys here: {', '.join(_valid_keys(loc, root))}")
    value = err.get("input")
    if kind == "finite_number":
        return UserError(field, f"got {value!r}: must be a finite number", f"set {field} to a finite number")
    if len(loc) < len(err["loc"]):  # a union: say every accepted form
        forms = [e["msg"].removeprefix("Input should be ") for e in errors
                 if _field_path(tuple(e["loc"]), root) == loc]
        return UserError(field, f"got {value!r}: must be {' or '.join(forms)}", f"set {field} to one of those")
    rule = err["msg"][0].lower() + err["msg"][1:]
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        fix = f"set {field} to a value that is {rule.removeprefix('input should be ')}"
    elif kind == "literal_error":
        fix = f"set {field} to one of {ctx.get('expected')}"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        fix = f"give {field} a value of the right type (got {type(value).__name__} {value!r})"
    else:
        fix = f"correct {field}"
    return UserError(field, f"got {value!r}: {rule}", fix)
