"""Command-line options from config dataclasses, and parsed options back into them.

Each leaf field (pagoda.config.fields) is a flag named after it (`max_num_seqs` ->
`--max-num-seqs`) with the field's default, its docstring as help, and a type from its
annotation: bool -> `--x/--no-x`, Literal[...] -> choices, list[T] -> comma-separated and
repeatable, Annotated[T, parse] -> `parse`, int/float/str as such. `metadata={"short":
"-i"}` on a field adds a short flag. Imports no torch: every `pagoda` command builds these.
"""

from __future__ import annotations

import argparse
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pagoda.config.fields import (
    ConfigField,
    flat_fields,
    from_flat,
    literal_choices,
    text_parser,
    without_none,
)

T = TypeVar("T")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type,
                            positional: Sequence[str] = ()) -> None:
    """`cls`'s leaf fields as options of `parser`, one argument group per dataclass (titled
    after it: ServerConfig -> "server"); the fields named in `positional` are optional
    positional arguments instead."""
    groups: dict[type, Any] = {}
    for f in flat_fields(cls).values():
        if f.owner not in groups:
            groups[f.owner] = parser.add_argument_group(_title(f.owner))
        group = groups[f.owner]
        if f.name in positional:
            group.add_argument(f.name, nargs="?", default=f.default(), help=_help(f))
        else:
            flags = [f"--{f.name.replace('_', '-')}"]
            if "short" in f.field.metadata:
                flags.insert(0, f.field.metadata["short"])
            group.add_argument(*flags, **_options(f))


def dataclass_from_args(cls: type[T], args: argparse.Namespace) -> T:
    """The `cls` that options added by `add_dataclass_arguments` were parsed into."""
    return from_flat(cls, {name: getattr(args, name) for name in flat_fields(cls)})


def _title(cls: type) -> str:
    words = re.findall(r"[A-Z][a-z0-9]*", cls.__name__.removesuffix("Config"))
    return " ".join(words).lower() or cls.__name__


def _help(f: ConfigField) -> str:
    text = " ".join(f.help.split()).replace("%", "%%")
    default = f.default()
    if not f.required and default is not None and default != []:
        text += " (default: %(default)s)"
    return text


def _options(f: ConfigField) -> dict[str, Any]:
    hint, _ = without_none(f.type)
    options: dict[str, Any] = {"help": _help(f)}
    if f.required:
        options["required"] = True
    else:
        options["default"] = f.default()
    choices = literal_choices(hint)
    if hint is bool:
        options["action"] = argparse.BooleanOptionalAction
    elif choices is not None:
        options.update(choices=choices, type=type(choices[0]))
    elif typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        options.update(action=_ListAction, type=_list_parser(_parser(item, f)))
    else:
        options["type"] = _parser(hint, f)
    return options


def _parser(hint: Any, f: ConfigField) -> Callable[[str], Any]:
    """The function that turns one command-line value into the field's type."""
    parse = text_parser(hint)
    if parse is not None:
        return parse
    if hint in (int, float, str):
        return hint  # type: ignore[no-any-return]
    raise TypeError(f"{f.owner.__name__}.{f.name}: no command-line form for {hint!r}")


def _list_parser(item: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [item(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {getattr(item, '__name__', 'value')}s, "
                f"got {text!r}") from None

    return parse


class _ListAction(argparse.Action):
    """A list option: each use adds its comma-separated values (`--x a,b --x c`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        current = getattr(namespace, self.dest)
        setattr(namespace, self.dest, [*([] if current is self.default else current), *values])
