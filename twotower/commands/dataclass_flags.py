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
field's flag is a comma list (its default shown joined, None as empty): give it a `type` that
makes the tuple, or read it back yourself (an override in `config_from`); one given `nargs`
parses to a list, which `config_from` makes the tuple.

Other spellings, per field: `flag_names` gives a field flags of other names (`--split` for
`splits`, aliases such as `--batch-size`), still read back into the field; a field named in
`positional` is a positional argument (`bundle`, not `--bundle`; one with a default needs
`nargs="?"`); SWITCH_OFF makes a bool defaulting to True one switch that turns it off
(`--no_<name>`, or its `flag_names`), shown with default False (not given).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Iterable, Mapping, Optional, Sequence

#: kwargs for a bool field spelt `--<name> on|off` (`config_from` turns it back into a bool).
ON_OFF: Mapping[str, Any] = {"choices": ("on", "off")}
#: kwargs for a bool field defaulting to True spelt as a switch that turns it off
#: (`--no_onnx` for `onnx`): the parsed `no_<name>` is what `config_from` negates.
SWITCH_OFF: Mapping[str, Any] = {"action": "store_true"}


def _field_type(hint: Any) -> Any:
  """The type a flag parses to: `Optional[X]` -> X; anything else as annotated."""
  args = typing.get_args(hint)
  # `X | None` (types.UnionType) as well as `Optional[X]`.
  if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
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


def _switch_off(hint: Any, default: Any, kwargs: Mapping[str, Any]) -> bool:
  return hint is bool and default is True and kwargs.get("action") == SWITCH_OFF["action"]


def _dest(option_strings: Sequence[str]) -> str:
  """The dest argparse derives from `option_strings` (its first long flag)."""
  long = [o for o in option_strings if o.startswith("--")]
  return (long or option_strings)[0].lstrip("-").replace("-", "_")


def add_fields(parser: argparse.ArgumentParser, config_class: type,
               help: Mapping[str, str] = {},  # pylint: disable=redefined-builtin
               *, names: Optional[Sequence[str]] = None, exclude: Iterable[str] = (),
               kwargs: Mapping[str, Mapping[str, Any]] = {},
               flag_names: Mapping[str, Sequence[str]] = {},
               positional: Iterable[str] = ()) -> tuple[str, ...]:
  """Adds `--<field>` for the fields of `config_class` (module docstring): those of `names`
  in that order, else every field but `exclude` in the dataclass's order. `kwargs`: extra or
  overriding `add_argument` keywords per field (choices, type, ON_OFF, SWITCH_OFF...);
  `flag_names`: a field's flags when not `--<name>` (read back into the field); `positional`:
  fields that are positional arguments. Returns the field names added."""
  fields = {f.name: f for f in dataclasses.fields(config_class)}
  hints = typing.get_type_hints(config_class)
  positional = tuple(positional)
  unknown = [n for n in (*(names or ()), *exclude, *kwargs, *flag_names, *positional)
             if n not in fields]
  if unknown:
    raise TypeError(f"{config_class.__name__} has no field {unknown[0]!r}")
  skip = set(exclude)
  chosen = list(names) if names is not None else [n for n in fields if n not in skip]
  both = [n for n in positional if n in flag_names]
  if both:  # a positional's dest is its one name
    raise TypeError(f"{config_class.__name__}.{both[0]}: positional or flag_names, not both")
  for name in chosen:
    field = fields[name]
    text = field.metadata.get("help", help.get(name))
    if not text:
      raise TypeError(f"no help for {config_class.__name__}.{name}: give it in the field's "
                      "metadata or in the command's help mapping")
    hint, default, extra = hints[name], _default(field), kwargs.get(name, {})
    options: dict[str, Any] = {"help": text}
    flags = tuple(flag_names.get(name, (f"--{name}",)))
    if default is dataclasses.MISSING:
      options.update(required=True)
      if not _is_tuple(hint):  # a tuple's flag: a comma list or nargs (module docstring)
        options.update(type=_field_type(hint))
    elif _switch_off(hint, default, extra):
      flags = tuple(flag_names.get(name, (f"--no_{name}",)))
      options.update(dest=f"no_{name}", default=False)
    elif hint is bool and name not in kwargs:
      options.update(action="store_true" if default is False
                     else argparse.BooleanOptionalAction, default=default)
    elif hint is bool:  # ON_OFF or another spelling given in kwargs
      options.update(default="on" if default else "off")
    elif _is_tuple(hint):
      options.update(default=",".join(map(str, default or ())))
    else:
      options.update(type=_field_type(hint), default=default)
    if name in positional:
      flags = (name,)
      options.pop("required", None)  # argparse: a positional without nargs='?' is required
    elif "dest" not in options and _dest(flags) != name:
      options["dest"] = name
      if (extra.get("action", options.get("action", "store")) in ("store", "append")
          and "choices" not in extra):
        # The metavar argparse shows for the flag's own name (`--split SPLIT`, not SPLITS).
        options["metavar"] = _dest(flags).upper()
    options.update(extra)
    parser.add_argument(*flags, **options)
  return tuple(chosen)


def config_from(args: argparse.Namespace, config_class: type, **overrides: Any):
  """`config_class` built from the parsed flags named like its fields, `overrides` first
  (values the command checked or converted, nested configs, fields with no flag); a field
  with neither keeps its default. An `on`/`off` flag becomes a bool, a SWITCH_OFF's
  `no_<name>` its negation, a tuple field's list (nargs) a tuple; a tuple field still a
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
      elif _is_tuple(hints[name]) and isinstance(value, list):
        value = tuple(value)
      values[name] = value
    elif hints[name] is bool and hasattr(args, f"no_{name}"):  # SWITCH_OFF
      values[name] = not getattr(args, f"no_{name}")
  return config_class(**values)
