"""The fields of config dataclasses as users name them: a flat name per leaf field (unique
across a tree of nested configs), its type, default and help text, the docstring written
after the field. `LLM(...)` keywords and the command-line flags both come from here."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import operator
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ConfigField:
    """One leaf field of a config tree."""

    name: str
    """Its flat name: the field's own name."""
    owner: type
    """The dataclass whose instance holds it."""
    path: tuple[str, ...]
    """Attributes from the root config to `owner` (e.g. ("cache",))."""
    type: Any
    """The resolved annotation (Annotated extras kept)."""
    field: dataclasses.Field
    help: str
    """Its docstring; "" when it has none."""

    @property
    def required(self) -> bool:
        return (self.field.default is dataclasses.MISSING
                and self.field.default_factory is dataclasses.MISSING)

    def default(self) -> Any:
        """The default value (a fresh one for a default_factory); MISSING when required."""
        if self.field.default_factory is not dataclasses.MISSING:
            return self.field.default_factory()
        return self.field.default


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal right after it) in `cls` and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for stmt, after in zip(body, body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def flat_fields(cls: type) -> dict[str, ConfigField]:
    """The leaf fields of `cls` and of the dataclasses nested in it, by flat name, in
    declaration order. Two leaves with one name are a TypeError: a flat name is one option."""
    found: dict[str, ConfigField] = {}

    def walk(klass: type, path: tuple[str, ...]) -> None:
        hints, docs = type_hints(klass), field_docs(klass)
        for f in dataclasses.fields(klass):
            hint = hints[f.name]
            if dataclasses.is_dataclass(hint):
                walk(hint, (*path, f.name))  # type: ignore[arg-type]
                continue
            if f.name in found:
                first = ".".join((*found[f.name].path, f.name))
                raise TypeError(f"{cls.__name__}: {first} and {'.'.join((*path, f.name))} "
                                f"share the flat name {f.name!r}")
            found[f.name] = ConfigField(f.name, klass, path, hint, f, docs.get(f.name, ""))

    walk(cls, ())
    return found


def from_flat(cls: type[T], values: dict[str, Any]) -> T:
    """`cls` from flat keyword values; nested configs are built from theirs, and every field
    not given keeps its default. An unknown name is a TypeError naming the closest ones."""
    fields = flat_fields(cls)
    unknown = [name for name in values if name not in fields]
    if unknown:
        raise TypeError(f"{cls.__name__}: unknown keyword argument "
                        f"{'; '.join(_with_closest(name, list(fields)) for name in unknown)}")

    def build(klass: type) -> Any:
        kwargs = {}
        for f in dataclasses.fields(klass):
            hint = type_hints(klass)[f.name]
            if dataclasses.is_dataclass(hint):
                kwargs[f.name] = build(hint)  # type: ignore[arg-type]
            elif f.name in values:
                kwargs[f.name] = _from_text(f.name, hint, values[f.name])
        return klass(**kwargs)

    return build(cls)


def _with_closest(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=3)
    return f"{name!r} (did you mean {', '.join(map(repr, close))}?)" if close else repr(name)


def without_none(hint: Any) -> tuple[Any, bool]:
    """`hint` less its `| None`, and whether it had one."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return functools.reduce(operator.or_, rest), True
    return hint, False


def text_parser(hint: Any) -> Callable[[str], Any] | None:
    """The parser an `Annotated[T, parse]` annotation (or one with `| None`) declares for a
    value given as text, on the command line or as an `LLM` keyword; None for others."""
    inner, _ = without_none(hint)
    if typing.get_origin(inner) is typing.Annotated:
        return next((m for m in inner.__metadata__ if callable(m)), None)
    return None


def _from_text(name: str, hint: Any, value: Any) -> Any:
    """`value` of field `name`, parsed where it is text and the field declares a parser."""
    parse = text_parser(hint)
    if parse is None or not isinstance(value, str):
        return value
    try:
        return parse(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def literal_choices(hint: Any) -> tuple[Any, ...] | None:
    """The values of a Literal[...] (or Literal[...] | None) annotation; None otherwise."""
    inner, _ = without_none(hint)
    return typing.get_args(inner) if typing.get_origin(inner) is Literal else None


def check_choices(config: Any) -> None:
    """ValueError for a Literal-typed field of `config` that holds another value."""
    for f in dataclasses.fields(config):
        hint = type_hints(type(config))[f.name]
        choices, value = literal_choices(hint), getattr(config, f.name)
        if choices is None or value in choices or (value is None and without_none(hint)[1]):
            continue
        raise ValueError(f"{f.name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")


def flat_values(config: Any) -> dict[str, Any]:
    """Each leaf field's value by flat name: what `from_flat` builds `config` back from."""
    values = {}
    for name, f in flat_fields(type(config)).items():
        owner = config
        for attr in f.path:
            owner = getattr(owner, attr)
        values[name] = getattr(owner, name)
    return values
