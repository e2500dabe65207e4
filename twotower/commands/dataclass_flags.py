"""Flags derived from a stage's config dataclass, and the config built back from them.

The idea of Tevatron's `HfArgumentParser` (transformers') over dataclasses, on plain argparse:
a field's flag takes its name, type and default from the dataclass, so a new setting is one
field plus one help line, and parsing maps the flags back into the config by name (before, a
setting was restated three times: the field, `add_argument` with a copy of its default, and
the keyword that carried it back).

    add_fields(parser, Config, HELP, exclude=("beam_args",))   # --<field> per field
    config = config_from(args, Config, out=checked_out)          # fields read back by name

Per field: `--<name>`, `type` from the annotation (`Optional[X]` -> X), `default` from the
dataclass; no default -> required; a bool defaulting to False -> a switch (`store_true`), one
defaulting to True -> `--<name>/--no-<name>`. `help` from the field's metadata
(`dataclasses.field(metadata={"help": ...})`) or from the `help` mapping the command keeps; a
field with neither is a programming error. `choices` and any other argparse keyword come per
field (`kwargs`); ON_OFF is the `--<name> on|off` spelling some stages use for a bool. A tuple
field's flag is a comma list (its default shown joined): give it a `type` that makes the
tuple, or read it back yourself (an override in `config_from`).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Iterable, Mapping, Optional, Sequence

#: kwargs for a bool field spelt `--<name> on|off` (`config_from` turns it back into a bool).
ON_OFF: Mapping[str, Any] = {"choices": ("on", "off")}


def _field_type(hint: Any) -> Any:
  """The type a flag parses to: `Optional[X]` -> X; anything else as annotated."""
  args = typing.get_args(hint)
  if typing.get_origin(hint) is typing.Union and type(None) in args:
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
      return rest[0]
  return hint


def _is_tuple(hint: Any) -> bool:
  return typing.get_origin(_field_type(hint)) is tuple


def _default(field: dataclasses.Field) -> Any:
  if field.default is not dataclasses.MISSING:
    return field.default
  if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
    return field.default_factory()  # type: ignore[misc]
  return dataclasses.MISSING


def add_fields(parser: argparse.ArgumentParser, config_class: type,
               help: Mapping[str, str] = {},  # pylint: disable=redefined-builtin
               *, names: Optional[Sequence[str]] = None, exclude: Iterable[str] = (),
               kwargs: Mapping[str, Mapping[str, Any]] = {}) -> tuple[str, ...]:
  """Adds `--<field>` for the fields of `config_class` (module docstring): those of `names`
  in that order, else every field but `exclude` in the dataclass's order. `kwargs`: extra or
  overriding `add_argument` keywords per field (choices, type, ON_OFF...). Returns the
  field names added."""
  fields = {f.name: f for f in dataclasses.fields(config_class)}
  hints = typing.get_type_hints(config_class)
  unknown = [n for n in (*(names or ()), *exclude, *kwargs) if n not in fields]
  if unknown:
    raise TypeError(f"{config_class.__name__} has no field {unknown[0]!r}")
  skip = set(exclude)
  chosen = list(names) if names is not None else [n for n in fields if n not in skip]
  for name in chosen:
    field = fields[name]
    text = field.metadata.get("help", help.get(name))
    if not text:
      raise TypeError(f"no help for {config_class.__name__}.{name}: give it in the field's "
                      "metadata or in the command's help mapping")
    hint, default = hints[name], _default(field)
    options: dict[str, Any] = {"help": text}
    if default is dataclasses.MISSING:
      options.update(required=True, type=_field_type(hint))
    elif hint is bool and name not in kwargs:
      options.update(action="store_true" if default is False
                     else argparse.BooleanOptionalAction, default=default)
    elif hint is bool:  # ON_OFF or another spelling given in kwargs
      options.update(default="on" if default else "off")
    elif _is_tuple(hint):
      options.update(default=",".join(map(str, default)))
    else:
      options.update(type=_field_type(hint), default=default)
    options.update(kwargs.get(name, {}))
    parser.add_argument(f"--{name}", **options)
  return tuple(chosen)


def config_from(args: argparse.Namespace, config_class: type, **overrides: Any):
  """`config_class` built from the parsed flags named like its fields, `overrides` first
  (values the command checked or converted, nested configs, fields with no flag); a field
  with neither keeps its default. An `on`/`off` flag becomes a bool; a tuple field still a
  string is a TypeError (its flag needs a `type` or an override)."""
  fields = {f.name: f for f in dataclasses.fields(config_class)}
  unknown = sorted(set(overrides) - set(fields))
  if unknown:
    raise TypeError(f"{config_class.__name__} has no field {unknown[0]!r}")
  hints = typing.get_type_hints(config_class)
  values: dict[str, Any] = {}
  for name in fields:
    if name in overrides:
      values[name] = overrides[name]
    elif hasattr(args, name):
      value = getattr(args, name)
      if hints[name] is bool and value in ON_OFF["choices"]:
        value = value == "on"
      elif _is_tuple(hints[name]) and isinstance(value, str):
        raise TypeError(f"--{name} is still a string: give its flag a type or "
                        "config_from an override")
      values[name] = value
  return config_class(**values)
