"""Shared model machinery: strict pydantic models and the translation of every kind of
validation problem into `Diagnostic`s that point at a file, a line and a field."""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar, Self, TypeVar, Union

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from syncer.diagnostics import UNKNOWN_FIELD, Diagnostic, FieldPath, Severity, did_you_mean, format_path
from syncer.models.k8s import Issue, K8sType, check_field
from syncer.yamldoc import YamlDoc

M = TypeVar("M", bound="StrictModel")


def _refuse(self: object, *args: object, **kwargs: object) -> Any:
    raise TypeError("a model's empty default is shared by every instance and cannot be changed")


class FrozenEmptyList(list[Any]):
    """The empty list every model shares as the default of a list field. pydantic copies a
    default it cannot hash into every instance (84,000 empty lists in a 2,000-unit repository);
    this one hashes, so it is shared, and refuses every change (the models are frozen, and nothing
    changes a loaded model's values in place)."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return 0

    def __copy__(self) -> list[Any]:
        return []  # a copy is the caller's to fill

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> list[Any]:
        return []

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse


class FrozenEmptyDict(dict[Any, Any]):
    """FrozenEmptyList's counterpart for dict fields (a big repository's models have an empty dict
    in most of their dict fields)."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return 0

    def __copy__(self) -> dict[Any, Any]:
        return {}  # a copy is the caller's to fill

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> dict[Any, Any]:
        return {}

    update = setdefault = pop = popitem = clear = _refuse
    __setitem__ = __delitem__ = __ior__ = _refuse


EMPTY_LIST: list[Any] = FrozenEmptyList()
EMPTY_DICT: dict[Any, Any] = FrozenEmptyDict()
_GIVEN: dict[frozenset[str], set[str]] = {}  # StrictModel.model_post_init: one set per combination of fields given
MAX_GIVEN = 4_096  # combinations kept for sharing; a repository is untrusted input, so this cache is bounded


class StrictModel(BaseModel):
    """Unknown keys are errors, types are not coerced (a quoted "2" is not an integer), and the
    model is immutable once validated. A field whose default is `[]` or `{}` gets EMPTY_LIST or
    EMPTY_DICT instead (`__pydantic_init_subclass__`), one for every instance."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False, defer_build=True)

    #: Extra guidance for a field, shown with errors about it (alias -> hint).
    field_hints: ClassVar[dict[str, str]] = {}

    def semantic_issues(self) -> list[Issue]:
        """Rules that span fields; override in document models. Paths use the YAML names."""
        return []

    def model_post_init(self, context: Any, /) -> None:
        """One set of the names of the fields given, shared by every instance given the same ones.
        pydantic makes a set per instance, which for a set of a few names is more than most of the
        instance's values take. Nothing changes it in place: the models
        are frozen, and `model_copy` copies it before it adds to it."""
        given = self.__pydantic_fields_set__
        if len(_GIVEN) > MAX_GIVEN:  # combinations no model holds any more pile up: start afresh
            _GIVEN.clear()
        object.__setattr__(self, "__pydantic_fields_set__", _GIVEN.setdefault(frozenset(given), given))

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for info in cls.__pydantic_fields__.values():  # before the validator is built (defer_build)
            if type(info.default) is list and not info.default:
                info.default = EMPTY_LIST
            elif type(info.default) is dict and not info.default:
                info.default = EMPTY_DICT

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        """The model itself: it is frozen, and nothing changes a loaded model's values in place.
        pydantic deep-copies a model-typed default (`ports: SuperLinkPorts = SuperLinkPorts()`)
        into every instance: one copy per instance, of a value nothing changes."""
        return self


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes (or other types) an annotation may hold, through Optional/list/dict/Annotated."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    if origin in (list, tuple, set, frozenset):
        args = typing.get_args(annotation)
        return _unwrap(args[0]) if args else []
    if origin is dict:
        args = typing.get_args(annotation)
        return _unwrap(args[1]) if len(args) == 2 else []
    return [annotation]


def _model_in(annotation: Any) -> type[StrictModel] | None:
    for candidate in _unwrap(annotation):
        if isinstance(candidate, type) and issubclass(candidate, StrictModel):
            return candidate
    return None


def _aliases(cls: type[BaseModel]) -> dict[str, str]:
    return {(f.alias or name): name for name, f in cls.model_fields.items()}


def model_at(cls: type[StrictModel], loc: FieldPath) -> type[StrictModel] | None:
    """The model class that owns the last element of `loc`, walking from `cls`."""
    current: type[StrictModel] | None = cls
    for elem in loc[:-1]:
        if current is None:
            return None
        if isinstance(elem, int):
            continue
        aliases = _aliases(current)
        if elem not in aliases:
            # dict keys (e.g. a map of models) do not name fields: stay on the current model
            continue
        current = _model_in(current.model_fields[aliases[elem]].annotation)
    return current


def _k8s_marker(metadata: list[Any], annotation: Any) -> K8sType | None:
    """The K8sType marker of a field, also when it sits inside `Annotated[...] | None`."""
    for m in metadata:
        if isinstance(m, K8sType):
            return m
    candidates = typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else ()
    for arg in candidates:
        if typing.get_origin(arg) is typing.Annotated:
            found = next((m for m in arg.__metadata__ if isinstance(m, K8sType)), None)
            if found is not None:
                return found
    return None


def _k8s_issues(cls: type[StrictModel], data: Any, path: FieldPath) -> list[Issue]:
    """Check every field marked `K8sType` in raw data, recursing through nested models."""
    if not isinstance(data, dict):
        return []
    issues: list[Issue] = []
    for name, info in cls.model_fields.items():
        alias = info.alias or name
        if alias not in data:
            continue
        value = data[alias]
        marker = _k8s_marker(info.metadata, info.annotation)
        if marker is not None:
            issues.extend(check_field(value, marker, (*path, alias)))
            continue
        sub = _model_in(info.annotation)
        if sub is None:
            continue
        origin = typing.get_origin(info.annotation)
        if isinstance(value, list):
            for i, item in enumerate(value):
                issues.extend(_k8s_issues(sub, item, (*path, alias, i)))
        elif isinstance(value, dict) and origin is dict:
            for key, item in value.items():
                issues.extend(_k8s_issues(sub, item, (*path, alias, key)))
        else:
            issues.extend(_k8s_issues(sub, value, (*path, alias)))
    return issues


def _describe(cls: type[StrictModel], err: ErrorDetails, raw: Any) -> tuple[FieldPath, str, str]:
    loc: FieldPath = tuple(e for e in err["loc"] if isinstance(e, (str, int)))
    kind = err["type"]
    owner = model_at(cls, loc)
    field = loc[-1] if loc else ""
    hints = owner.field_hints if owner else {}
    if kind == "extra_forbidden" and isinstance(field, str):
        known = sorted(_aliases(owner)) if owner else []
        moved = MISPLACED_KEYS.get(field)
        guess = did_you_mean(field, known)
        if moved and moved[0] == cls.__name__:
            hint = f"it belongs at {moved[1]}"
        elif guess:
            hint = f"did you mean {guess!r}?"
        else:
            hint = f"valid fields here: {', '.join(known)}" if known else ""
        return loc, f"unknown field {field!r}", hint
    if kind == "missing":
        return loc, f"required field {field!r} is missing", hints.get(str(field), f"add {field}")
    msg = err["msg"]
    if kind in ("string_type", "int_type", "bool_type", "float_type", "dict_type", "list_type", "model_type"):
        got = err.get("input")
        msg = f"{msg}, got {type(got).__name__} {_short(got)}"
    hint = hints.get(str(field), "")
    got = err.get("input")
    if not hint and kind == "literal_error" and isinstance(got, str):
        expected = typing.get_args(_field_annotation(owner, field)) if owner is not None else ()
        right = next((e for e in expected if isinstance(e, str) and e.lower() == got.lower()), None)
        if right is not None:
            hint = f"write {right!r} (the spelling is case-sensitive)"
    if kind == "string_type" and isinstance(got, dict) and len(got) == 1 and next(iter(got.values())) is None:
        word = next(iter(got))
        hint = f'YAML read {{{word}}} as a mapping: quote it, "{{{word}}}"'
    if not hint and kind in ("int_type", "bool_type") and isinstance(err.get("input"), str):
        hint = "remove the quotes around the value"
    if not hint and kind == "string_type" and isinstance(err.get("input"), (int, float, bool)):
        hint = f'quote the value: "{err.get("input")}"'
    return loc, msg, hint


# Keys people put one level off, by the document class they appear in: where they belong.
MISPLACED_KEYS: dict[str, tuple[str, str]] = {
    "nodeConfig": ("SuperNodeValues", "supernode.node.config"),
    "config": ("SuperNodeValues", "supernode.node.config"),
    "isolation": ("SuperNodeValues", "supernode.isolationMode"),
    "replicaCount": ("SuperNodeValues", "supernode.replicas"),
}


def _field_annotation(owner: type[StrictModel], field: str | int) -> Any:
    """The annotation of `field` on `owner`, unwrapped from Optional and Annotated."""
    name = _aliases(owner).get(str(field))
    if name is None:
        return None
    annotation = owner.model_fields[name].annotation
    for arg in (typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType)
                else (annotation,)):
        inner = typing.get_args(arg)[0] if typing.get_origin(arg) is typing.Annotated else arg
        if typing.get_origin(inner) is typing.Literal:
            return inner
    return annotation


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validate_document(cls: type[M], doc: YamlDoc, unit: str = "") -> tuple[M | None, list[Diagnostic]]:
    """Validate one YAML document against `cls`, reporting every problem with its position."""
    found: list[tuple[FieldPath, str, str, Severity, str]] = []
    model: M | None = None
    try:
        model = cls.model_validate(doc.data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        for err in errors:
            found.append((*_describe(cls, err, doc.data), "error",
                          UNKNOWN_FIELD if err["type"] == "extra_forbidden" else ""))
        if all(err["type"] == "extra_forbidden" for err in errors):
            # Only unknown keys: validate again without them, so the rules that span fields
            # are reported in the same run instead of after the typos are fixed.
            stripped = _without(doc.data, [tuple(err["loc"]) for err in errors])
            try:
                model = cls.model_validate(stripped)
            except ValidationError:
                model = None
    for issue in _k8s_issues(cls, doc.data, ()):
        found.append((issue.path, issue.message, issue.hint, issue.severity, ""))
    if model is not None:
        for issue in model.semantic_issues():
            found.append((issue.path, issue.message, issue.hint, issue.severity, ""))
    diags = []
    seen: set[tuple[FieldPath, str]] = set()
    for path, message, hint, severity, code in found:
        if (path, message) in seen:
            continue
        seen.add((path, message))
        line, col = doc.position(path)
        diags.append(Diagnostic(doc.file, line, col, format_path(path), message, hint, severity, unit=unit, code=code))
    if any(d.severity == "error" for d in diags):
        return None, sorted(diags)
    return model, sorted(diags)  # warnings only: the document is used


def _without(data: Any, locs: list[tuple[Any, ...]]) -> Any:
    """A copy of `data` with the keys at `locs` removed (copying only the containers on the way)."""
    if not locs:
        return data
    if isinstance(data, dict):
        drop = {loc[0] for loc in locs if len(loc) == 1}
        out: dict[Any, Any] = {}
        for key, value in data.items():
            if key in drop:
                continue
            out[key] = _without(value, [loc[1:] for loc in locs if len(loc) > 1 and loc[0] == key])
        return out
    if isinstance(data, list):
        return [_without(item, [loc[1:] for loc in locs if len(loc) > 1 and loc[0] == i])
                for i, item in enumerate(data)]
    return data
