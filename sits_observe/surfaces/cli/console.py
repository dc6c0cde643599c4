"""The two consoles every CLI command prints through, and the rules they enforce.

Data goes to stdout (:data:`out`), diagnostics to stderr (:data:`err`). Both are
:class:`PlainConsole` instances, which hold these invariants for every command at once:

- Nothing printed is read as Rich markup or as an emoji code. Paths, labels, model names and
  flag values come from users and exporters, and ``[/x]``, ``[bold]`` or ``:smile:`` in them
  print as written (markup in data used to raise ``rich.errors.MarkupError``, some of it after
  rows were committed). Styles come only from the product: :func:`styled` parts and
  ``style=`` arguments, never from text.
- Control characters (C0 including newline and tab, DEL, C1, U+2028/U+2029) in a printed
  string are shown as their Python escapes (``\\x1b``, ``\\n``, ``\\t``): data cannot move
  the cursor or recolour a terminal, and one printed string is one line. So every ``print``
  of product text is one line; a product message that needs two lines makes two calls.
- Diagnostics are never wrapped, whatever the terminal width: a message is one line that a
  log file or a CI log can grep (stderr soft-wraps, the terminal folds long lines itself).
- Width of data tables. On a terminal (stdout ``isatty()``) tables fit its width as Rich
  measures it: ``$COLUMNS``, else the terminal's size. Anywhere else (a pipe, a file, a CI
  log, a test runner) they print at their natural width and ``$COLUMNS`` is ignored: someone
  piping to ``grep``, ``awk`` or a file wants whole rows, so no cell is cut or wrapped and a
  row is one line. A table's title does not wrap there either (:func:`data_table`).
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console, ConsoleDimensions, HighlighterType, JustifyMethod, OverflowMethod
from rich.style import Style
from rich.table import Table
from rich.text import Text

#: Width, in cells, of "natural width" off a terminal: wider than any table the CLI prints,
#: and nothing the CLI prints pads to the console width (no rules, panels or expanded tables).
NATURAL_WIDTH = 100_000

# C0 controls (newline and tab included), DEL, the C1 controls (ESC's 8-bit forms) and the
# Unicode line and paragraph separators (line breaks to Rich's measuring, not to its wrapping).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: str) -> str:
    """``text`` with each control character written as its Python escape (``\\x1b``, ``\\n``);
    everything else, ``[`` and ``]`` included, exactly as given."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _is_tty(file: object) -> bool:
    isatty = getattr(file, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed file
        return False


class PlainConsole(Console):
    """A Rich console that shows text as written (see the module docstring).

    ``diagnostics`` (stderr): soft-wrapped, so no message is ever broken into lines.
    Otherwise (stdout): natural width when the output is not a terminal.
    """

    def __init__(self, *, diagnostics: bool) -> None:
        # Set before Console.__init__, which may ask for the size.
        self._diagnostics = diagnostics
        super().__init__(
            stderr=diagnostics,
            markup=False,
            emoji=False,
            highlight=False,
            soft_wrap=diagnostics,
        )

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        """Every string printed (argument, table cell, title) passes here: controls are
        escaped, and markup, emoji codes and highlighting stay off whatever a caller asks."""
        return super().render_str(
            shown(text),
            style=style,
            justify=justify,
            overflow=overflow,
            emoji=False,
            markup=False,
            highlight=False,
            highlighter=highlighter,
        )

    @property
    def size(self) -> ConsoleDimensions:
        """Rich's size, except that data off a terminal gets :data:`NATURAL_WIDTH`."""
        dimensions = super().size
        if not self._diagnostics and not _is_tty(self.file):
            return ConsoleDimensions(NATURAL_WIDTH, dimensions.height)
        return dimensions

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


#: Data: tables and results, on stdout.
out = PlainConsole(diagnostics=False)
#: Diagnostics: errors, warnings, notes and progress, on stderr.
err = PlainConsole(diagnostics=True)


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line from plain parts and ``(text, style)`` parts, each shown as written (no
    markup; control characters escaped, see :func:`shown`)."""
    line = Text()
    for part in parts:
        if isinstance(part, tuple):
            line.append(shown(part[0]), style=part[1])
        else:
            line.append(shown(part))
    return line


def note(message: str, *, label: str = "note", style: str = "yellow") -> None:
    """``label: message`` on one line of stderr, the label in ``style``."""
    err.print(styled((f"{label}:", style), " ", message))


def data_table(title: str | None = None, **options: Any) -> Table:
    """A Rich table for :data:`out`; ``options`` go to :class:`rich.table.Table`.

    Off a terminal its title is one line, left-aligned, never wrapped to the table's width
    (a path in a title stays greppable); on a terminal it is Rich's centred title.
    """
    if title is None or _is_tty(out.file):
        return Table(title=title, **options)
    whole = Text(shown(title), no_wrap=True, overflow="ignore")
    return Table(title=whole, **options)
