"""Templates that carry article text, rendered without their definitions (wtf_wikipedia's way).

pipelines.wiki.wikitext drops every `{{template}}` except those named here: for these it collects
the parameters from mwparserfromhell's token stream and calls `render(name, args)`, which
gives the visible text, or None (then the template is dropped as before). The table is keyed
by `normalize_name` of the name, so `{{Convert|..}}`, `{{convert |..}}` and
`{{Template:convert|..}}` are one template, and `ALIASES` maps the common redirects of the
English Wikipedia (e.g. `cvt` -> `convert`) to the name rendered.

What the families give (MediaWiki's own output in brackets where it differs):

* units and places: `convert`/`cvt` -> the value and unit as written, a range kept ("1 to 2 km"), no
  conversion ("100 km" for `{{convert|100|km|mi}}`, not "100 kilometres (62 mi)"); a few unit
  codes written as symbols (`km2` -> "km²", `C` -> "°C"). `val` -> "1.23±0.04 m", "6.241×10^18".
  `height` -> "5 ft 11 in". `coord` -> "13°19′N 169°9′W" (inline ones; `display=title` ones
  are shown beside the title, not in the text).
* dates: `start date`, `birth date`, `death date`, `dts`, `date`, ... -> "February 12, 1809"
  ("12 February 1809" with `df=y`); `death date and age` adds "(aged 56)"; `birth date and
  age` gives the date only (the age depends on the day the page is read); `as of`,
  `circa`/`c.`, `floruit`, `birth year and age`.
* text wrappers: `nowrap`, `nobr`, `small`, `lang`, `lang-xx`, `transl`, `IPA`, `IPA-xx`,
  `IPAc-en` ("/ˈeɪbrəhæm/"), `respell` ("AL-bə-nee-ə"), `nihongo` ("English (漢字, rōmaji)"),
  `abbr`, `sic`, `quote`, `math`/`mvar`, `chem`, `angbr`, `ill`, `flag` (the name, no icon),
  `sup`/`sub`, `gaps`, `script`, ... -> their text.
* numbers and money: `frac`/`sfrac` ("3 1/2"), `ordinal` ("21st"), `nts`, `US$` and currency
  symbols ("US$2 billion", "£5"), `formatnum:` ("1,234,567").
* punctuation templates: `ndash`, `mdash`, `snd`, `·`, `!`, `nbsp`, ...

Everything else (citations, hatnotes, infoboxes, navboxes, maintenance tags, `inflation`,
`age` without an end date) is dropped: its output is not prose, depends on data
the dump does not hold, or on the day.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Mapping, Optional, Sequence

_SPACE = re.compile(r"[\s_]+")
_NUMBER = re.compile(r"[-+−]?[\d.,]*\d[\d.,]*(?:e[-+]?\d+)?")


def _strip_name(name: str) -> str:
  """Underscores as spaces, runs of spaces one, trimmed, `Template:` / `subst:` prefixes
  dropped; the case kept."""
  name = _SPACE.sub(" ", name).strip()
  changed = True
  while changed:
    changed = False
    for prefix in ("subst:", "safesubst:", "msgnw:", "template:"):
      if name[:len(prefix)].lower() == prefix:
        name, changed = name[len(prefix):].lstrip(), True
  return name


def normalize_name(name: str) -> str:
  """A template's name as MediaWiki resolves it: underscores are spaces, runs of spaces one,
  trimmed, a `Template:` prefix and `subst:` / `safesubst:` dropped; then lower-cased for
  the table (MediaWiki folds only the first letter, but the English Wikipedia holds a
  redirect for every case variant of the templates rendered here)."""
  return _strip_name(name).lower()


@dataclasses.dataclass(frozen=True)
class Args:
  """A template call's parameters: positional values in order, named ones by key (both with
  whitespace collapsed and trimmed, as MediaWiki trims named parameters)."""
  positional: tuple[str, ...]
  named: Mapping[str, str]

  def get(self, index: int, default: str = "") -> str:
    return self.positional[index] if index < len(self.positional) else default

  def flag(self, *keys: str) -> bool:
    """A yes-like named parameter (`df=y`, `lc=yes`)."""
    return any(self.named.get(k, "").lower() in ("y", "yes", "on", "true", "1") for k in keys)


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def _int(text: str) -> Optional[int]:
  text = text.strip()
  return int(text) if text.isdigit() else None


def _date(y: str, m: str = "", d: str = "", dmy: bool = False) -> Optional[str]:
  """"February 12, 1809" / "12 February 1809" / "February 1809" / "1809"."""
  year, month, day = _int(y), _int(m), _int(d)
  if year is None:
    return None
  if month is None or not 1 <= month <= 12:
    return str(year)
  name = _MONTHS[month - 1]
  if day is None or not 1 <= day <= 31:
    return f"{name} {year}"
  return f"{day} {name} {year}" if dmy else f"{name} {day}, {year}"


def _dmy(args: Args) -> bool:
  return args.flag("df") or args.named.get("format", "").lower() == "dmy"


def _ymd_date(args: Args, offset: int = 0) -> Optional[str]:
  """A date given as year|month|day positional parameters from `offset`; a single parameter
  that is not a year ("2006-01-02", "1 May 2001") is shown as written."""
  y, m, d = args.get(offset), args.get(offset + 1), args.get(offset + 2)
  if not y:
    return None
  if _int(y) is None:
    iso = re.fullmatch(r"(\d{3,4})-(\d\d?)(?:-(\d\d?))?", y)
    if iso:
      return _date(iso.group(1), iso.group(2), iso.group(3) or "", _dmy(args))
    return y
  return _date(y, m, d, _dmy(args))


def _age(born: Sequence[Optional[int]], at: Sequence[Optional[int]]) -> Optional[int]:
  by, bm, bd = born
  ay, am, ad = at
  if by is None or ay is None:
    return None
  age = ay - by
  if bm and am and ((am, ad or 0) < (bm, bd or 0)):
    age -= 1
  return age if age >= 0 else None


def _death_date_and_age(args: Args) -> Optional[str]:
  date = _ymd_date(args)
  if date is None:
    return None
  age = _age([_int(args.get(i)) for i in (3, 4, 5)], [_int(args.get(i)) for i in (0, 1, 2)])
  return date if age is None else f"{date} (aged {age})"


def _age_between(args: Args) -> Optional[str]:
  """`{{age|y|m|d|y2|m2|d2}}`: only with the second date (otherwise it depends on the day)."""
  if len(args.positional) < 4:
    return None
  age = _age([_int(args.get(i)) for i in (0, 1, 2)], [_int(args.get(i)) for i in (3, 4, 5)])
  return None if age is None else str(age)


def _as_of(args: Args) -> Optional[str]:
  date = _ymd_date(args)
  if date is None:
    return None
  word = "as of" if args.flag("lc") else "As of"
  if args.named.get("since", "").lower() in ("y", "yes"):
    word = "since" if args.flag("lc") else "Since"
  return f"{word} {date}"


# Unit codes of {{convert}} written as MediaWiki shows their symbol (others as written).
_UNIT_SYMBOLS = {
    "km2": "km²", "m2": "m²", "cm2": "cm²", "mm2": "mm²", "sqmi": "sq mi", "sqft": "sq ft",
    "sqin": "sq in", "sqyd": "sq yd", "m3": "m³", "km3": "km³", "cm3": "cm³", "cuft": "cu ft",
    "cuyd": "cu yd", "cumi": "cu mi", "C": "°C", "F": "°F", "K": "K", "e6acre": "million acres",
    "e6mi": "million miles", "e6km": "million km", "e3acre": "thousand acres",
    "e9m3": "billion m³", "e6m3": "million m³", "kmh": "km/h", "mph": "mph", "kn": "kn",
    "ftin": "ft", "ft.in": "ft", "usgal": "US gal", "impgal": "imp gal", "sqkm": "km²",
    "km/h": "km/h", "m/s": "m/s", "ft/s": "ft/s", "lb": "lb", "kg": "kg",
}
#: Words between the two values of a convert range (`{{convert|1|to|2|km}}`).
_RANGES = {"-": "–", "–": "–", "to": "to", "and": "and", "or": "or", "x": "×", "by": "by",
           "+": "+", "to(-)": "to", "and(-)": "and", "+/-": "±", "xx": "×", "*": "×"}


def _is_number(text: str) -> bool:
  return bool(_NUMBER.fullmatch(text.replace(" ", "")))


def _unit(code: str) -> str:
  return _UNIT_SYMBOLS.get(code, code)


def _convert(args: Args) -> Optional[str]:
  """Value(s) and unit(s) as written: "100 km", "1 to 2 km", "5 ft 6 in"."""
  p = [a for a in args.positional]
  if not p or not _is_number(p[0]):
    return None
  values = [p[0]]
  i = 1
  while i + 1 < len(p) and p[i] in _RANGES and _is_number(p[i + 1]):
    values += [_RANGES[p[i]], p[i + 1]]
    i += 2
  unit = p[i] if i < len(p) else ""
  text = " ".join(values)
  if unit:
    text = f"{text} {_unit(unit)}"
  # A compound input: {{convert|5|ft|6|in|cm}}.
  if i + 2 < len(p) and _is_number(p[i + 1]) and p[i + 2] and not _is_number(p[i + 2]):
    text = f"{text} {p[i + 1]} {_unit(p[i + 2])}"
  return text


def _coord(args: Args) -> Optional[str]:
  """`{{coord|13|19|N|169|9|W}}` -> "13°19′N 169°9′W", `{{coord|32.7|-86.7}}` -> "32.7°N
  86.7°W"; dropped when shown only beside the page title (`display=title`)."""
  display = args.named.get("display", "inline").lower()
  if "inline" not in display and display not in ("i", "it", "ti"):
    return None
  p = [a for a in args.positional if a and ":" not in a]  # "type:city" parameters are no text
  marks = [i for i, a in enumerate(p) if a.upper() in ("N", "S", "E", "W")]
  if len(marks) >= 2:
    lat, lon = p[:marks[0]], p[marks[0] + 1:marks[1]]
    return f"{_dms(lat)}{p[marks[0]].upper()} {_dms(lon)}{p[marks[1]].upper()}"
  if len(p) >= 2 and _is_number(p[0]) and _is_number(p[1]):
    lat, lon = float(p[0]), float(p[1])
    return (f"{abs(lat):g}°{'N' if lat >= 0 else 'S'} "
            f"{abs(lon):g}°{'E' if lon >= 0 else 'W'}")
  return None


def _dms(parts: Sequence[str]) -> str:
  return "".join(f"{v}{u}" for v, u in zip(parts, ("°", "′", "″")))


def _val(args: Args) -> Optional[str]:
  value = args.get(0)
  if not value:
    return None
  text = value
  error = args.get(1)
  if error.startswith("(") and error.endswith(")"):
    text += error
  elif error:
    text += f"±{error}"
  if args.named.get("e"):
    text += f"×10^{args.named['e']}"
  unit = args.named.get("u") or args.named.get("ul") or ""
  if unit:
    text += f" {unit}"
  return text


def _height(args: Args) -> Optional[str]:
  parts = [f"{args.named[k]} {k}" for k in ("m", "cm", "ft", "in") if args.named.get(k)]
  return " ".join(parts) or None


def _frac(args: Args) -> Optional[str]:
  p = args.positional
  if len(p) == 1:
    return f"1/{p[0]}"
  if len(p) == 2:
    return f"{p[0]}/{p[1]}"
  if len(p) >= 3:
    return f"{p[0]} {p[1]}/{p[2]}"
  return None


def _ordinal(args: Args) -> Optional[str]:
  n = _int(args.get(0))
  if n is None:
    return args.get(0) or None
  suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
  return f"{n}{suffix}"


def _nihongo(args: Args) -> Optional[str]:
  english, native = args.get(0), [a for a in (args.get(1), args.get(2)) if a]
  if not native:
    return english or None
  inside = ", ".join(native)
  return f"{english} ({inside})" if english else inside


def _ill(args: Args) -> Optional[str]:
  """Interlanguage link: its local title (or `lt=`); the old form puts the language first."""
  if args.named.get("lt"):
    return args.named["lt"]
  p = args.positional
  if len(p) >= 2 and re.fullmatch(r"[a-z]{2,3}(?:-[a-z]+)?", p[0]):
    return p[1]
  return args.get(0) or None


def _ipac(args: Args) -> Optional[str]:
  """`{{IPAc-en|ˈ|æ|l|b|ə}}` -> "/ˈælbə/" (labels such as `lang`, `US`, `pron` left out)."""
  labels = {"lang", "local", "pron", "pronunciation", "us", "uk", "also", "audio", "ipa",
            "ca", "au", "nz", "ie", "sa", "in", "or", "-", "fr", "de", "it", "es"}
  sounds = [p for p in args.positional if p.lower() not in labels]
  return "/" + "".join(sounds).replace("_", " ").strip() + "/" if sounds else None


def _currency(symbol: str) -> Callable[[Args], Optional[str]]:
  def render(args: Args) -> Optional[str]:
    value = args.get(0)
    return f"{symbol}{value}" if value else None
  return render


def _currency_code(args: Args) -> Optional[str]:
  """`{{currency|100|USD}}` -> "US$100"; an unknown code after the amount."""
  value, code = args.get(0), (args.get(1) or args.named.get("type", "")).upper()
  if not value:
    return None
  symbol = _CURRENCY_SYMBOLS.get(code)
  return f"{symbol}{value}" if symbol else f"{value} {code}".strip()


_CURRENCY_SYMBOLS = {"USD": "US$", "GBP": "£", "EUR": "€", "JPY": "¥", "INR": "₹", "CNY": "¥",
                     "AUD": "A$", "CAD": "C$", "RUB": "₽", "CHF": "CHF "}


def _first(args: Args) -> Optional[str]:
  return args.get(0) or None


def _second(args: Args) -> Optional[str]:
  return args.get(1) or None


def _last(args: Args) -> Optional[str]:
  return args.positional[-1] if args.positional else None


def _text_or(*keys: str) -> Callable[[Args], Optional[str]]:
  """The first of the named `keys` that is set, else the first positional parameter."""
  def render(args: Args) -> Optional[str]:
    for key in keys:
      if args.named.get(key):
        return args.named[key]
    return args.get(0) or None
  return render


def _join(separator: str) -> Callable[[Args], Optional[str]]:
  def render(args: Args) -> Optional[str]:
    parts = [p for p in args.positional if p]
    return separator.join(parts) if parts else None
  return render


def _const(text: str) -> Callable[[Args], Optional[str]]:
  return lambda args: text


def _prefixed(prefix: str) -> Callable[[Args], Optional[str]]:
  def render(args: Args) -> Optional[str]:
    value = args.get(0)
    return f"{prefix}{value}" if value else None
  return render


def _wrapped(left: str, right: str, index: int = 0) -> Callable[[Args], Optional[str]]:
  def render(args: Args) -> Optional[str]:
    value = args.get(index)
    return f"{left}{value}{right}" if value else None
  return render


def _date_at(offset: int) -> Callable[[Args], Optional[str]]:
  return lambda args: _ymd_date(args, offset)


def _formatnum(args: Args) -> Optional[str]:
  """`{{formatnum:1234567}}` -> "1,234,567" (the number comes in the name: see `render`)."""
  value = args.get(0).replace(",", "")
  whole, dot, fraction = value.partition(".")
  if not whole.lstrip("-").isdigit():
    return args.get(0) or None
  return f"{int(whole):,}" + (dot + fraction if dot else "")


#: normalised name -> renderer. A renderer returns the visible text or None (dropped).
RENDERERS: dict[str, Callable[[Args], Optional[str]]] = {
    # units
    "convert": _convert, "val": _val, "height": _height, "coord": _coord,
    # dates
    "start date": _ymd_date, "end date": _ymd_date, "birth date": _ymd_date,
    "death date": _ymd_date, "birth date and age": _ymd_date, "start date and age": _ymd_date,
    "end date and age": _ymd_date, "film date": _ymd_date, "dts": _ymd_date, "date": _ymd_date,
    "release date": _ymd_date, "death date and age": _death_date_and_age,
    "birth year and age": _first, "death year and age": _first, "age": _age_between,
    "as of": _as_of, "circa": _prefixed("c. "), "floruit": _prefixed("fl. "),
    "birth-date": _ymd_date, "death-date": _ymd_date,
    # text wrappers
    "nowrap": _first, "nobr": _first, "small": _first, "smaller": _first, "big": _first,
    "larger": _first, "resize": _last, "lang": _second, "transl": _last, "script": _last,
    "native name": _second, "ipa": _last, "respell": _join("-"), "ipac-en": _ipac,
    "nihongo": _nihongo, "abbr": _first, "sic": _last, "not a typo": _first,
    "quote": _text_or("text", "quote"), "blockquote": _text_or("text", "quote"),
    "math": _first, "mvar": _first, "chem": _join(""), "angbr": _wrapped("⟨", "⟩"),
    "ill": _ill, "flag": _text_or("name"), "flagcountry": _first, "sup": _first, "sub": _first,
    "gaps": _join(" "), "vanchor": _first, "linktext": _join(""), "lit": _wrapped("lit. '", "'"),
    "gloss": _wrapped("'", "'"), "em": _first, "strong": _first, "var": _first,
    "smallcaps": _first, "sc": _first, "proper name": _first,
    "uc": lambda args: args.get(0).upper() or None, "lc": lambda args: args.get(0).lower() or None,
    "ucfirst": lambda args: args.get(0)[:1].upper() + args.get(0)[1:] or None,
    "lcfirst": lambda args: args.get(0)[:1].lower() + args.get(0)[1:] or None,
    "keypress": _join("+"), "audio": _second, "hlist": _join(" · "), "flatlist": _first,
    "ubl": _join(", "), "unbulleted list": _join(", "), "plainlist": _first,
    "visible anchor": _first, "noitalic": _first, "nobold": _first, "serif": _first,
    "bigger": _first, "midsize": _first, "pslink": _second,
    # numbers and money
    "frac": _frac, "sfrac": _frac, "ordinal": _ordinal, "nts": _first, "ntsh": _first,
    "us$": _prefixed("US$"), "usd": _prefixed("US$"), "gbp": _prefixed("£"),
    "£": _prefixed("£"), "€": _prefixed("€"), "eur": _prefixed("€"), "jpy": _prefixed("¥"),
    "yen": _prefixed("¥"), "inr": _prefixed("₹"), "currency": _currency_code,
    "formatnum": _formatnum,
    # punctuation
    "ndash": _const("–"), "mdash": _const("—"), "snd": _const(" – "), "spaced ndash": _const(" – "),
    "·": _const(" · "), "dot": _const(" · "), "middot": _const("·"), "!": _const("|"),
    "nbsp": _const(" "), "thinsp": _const(" "), "spaces": _const(" "), "pipe": _const("|"),
    "=": _const("="), "'": _const("'"), "\"": _const('"'), "bull": _const(" • "),
}

#: Common redirects of the English Wikipedia to the templates above (alias -> name).
ALIASES = {
    "cvt": "convert", "convert/2": "convert", "bday": "birth date", "dob": "birth date",
    "birthdate": "birth date", "birth date and age2": "birth date and age",
    "bda": "birth date and age", "dda": "death date and age", "deathdate": "death date",
    "death date and given age": "death date and age", "start-date": "start date",
    "startdate": "start date", "c.": "circa", "ca.": "circa", "ca": "circa", "fl.": "floruit",
    "asof": "as of", "no wrap": "nowrap", "nowr": "nowrap", "ipa-all": "ipa",
    "ipa2": "ipa", "ipac": "ipac-en", "pron-en": "ipac-en", "ipa-en": "ipac-en",
    "transliteration": "transl", "tlit": "transl", "nihongo2": "nihongo", "nihongo3": "nihongo",
    "fraction": "frac", "ord": "ordinal", "us dollar": "us$", "usd$": "us$", "currency symbol":
    "currency", "abbreviation": "abbr", "interlanguage link": "ill", "interlanguage link multi":
    "ill", "ill2": "ill", "quotation": "quote", "cquote": "quote", "quote box": "quote",
    "n dash": "ndash", "en dash": "ndash", "m dash": "mdash", "em dash": "mdash",
    "spnd": "snd", "number table sorting": "nts", "date table sorting": "dts",
    "sortdate": "dts", "flagu": "flag", "fb": "flag", "nbs": "nbsp", "mid dot": "middot",
    "•": "bull", "unbulleted": "ubl", "smallcaps2": "smallcaps",
}

#: Name families rendered by pattern: `lang-fr` (the text, not "French: ..."), `IPA-de`,
#: ltgwiki's `Vol-en` (its lang-xx).
_LANG_X = re.compile(r"(?:lang|vol|langx)-[a-z-]{2,12}")
_IPA_X = re.compile(r"ipa-[a-z-]{2,12}")

#: Templates that mark a disambiguation page (English, Latgalian, Latvian names). Set index
#: articles (`{{surname}}`, `{{given name}}`, `{{shipindex}}`) are lists with prose about the
#: name or class, and stay articles.
DISAMBIGUATION = frozenset({
    "disambiguation", "disambig", "dab", "disamb", "dis", "hndis", "geodis", "numberdis",
    "roaddis", "schooldis", "hospitaldis", "letter-number combination disambiguation",
    "species latin name disambiguation", "disambiguation cleanup", "airport disambiguation",
    "call sign disambiguation", "chinese title disambiguation", "genus disambiguation",
    "place name disambiguation", "human name disambiguation", "mathematical disambiguation",
    "zeimeibu škiršona", "nozīmju atdalīšana",
})


def resolve(name: str, aliases: Mapping[str, str] = ALIASES) -> str:
  """The table key of a normalised name: itself, its alias target, or its pattern family."""
  name = aliases.get(name, name)
  if name in RENDERERS:
    return name
  if _LANG_X.fullmatch(name):
    return "lang-xx"
  if _IPA_X.fullmatch(name):
    return "ipa-xx"
  return name


_FAMILY = {"lang-xx": _first, "ipa-xx": _first}


def _parse_name(name: str) -> tuple[str, Optional[str]]:
  """(table key, the argument a parser function carries in its name, or None)."""
  name = _strip_name(name)
  if ":" in name:  # {{formatnum:1234}}, {{uc:text}}: the first argument is in the name.
    head, argument = name.split(":", 1)
    return resolve(head.strip().lower()), argument.strip()
  return resolve(name.lower()), None


def renderer(name: str) -> Optional[Callable[[Args], Optional[str]]]:
  """The renderer of a template by its raw name (as written between `{{` and `|`), or None
  when it is dropped."""
  key, _ = _parse_name(name)
  return RENDERERS.get(key) or _FAMILY.get(key)


def is_disambiguation(name: str) -> bool:
  return normalize_name(name) in DISAMBIGUATION


def render(name: str, positional: Sequence[str], named: Mapping[str, str]) -> Optional[str]:
  """The visible text of `{{name|positional..|key=value..}}`, or None when it is dropped."""
  key, argument = _parse_name(name)
  fn = RENDERERS.get(key) or _FAMILY.get(key)
  if fn is None:
    return None
  if argument is not None:
    positional = [argument, *positional]
  return fn(Args(tuple(positional), named))
