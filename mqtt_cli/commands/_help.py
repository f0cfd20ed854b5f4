"""The options of a command's --help, laid out so that nothing is cut at any width.

typer's panels give the long names, short names, --no- names, placeholder and help a column each; at 80 or 100
columns rich then shrinks every column alike, and cuts what cannot wrap: `--use-identity-as-us…`,
`mqtt[s]://[user[:pass]@]…`. Here the names (a --no- form on a line of its own) are never wrapped nor cut, the
placeholder may wrap, and the help takes the rest, folding a word longer than its column rather than cutting it.
The panels are typer's otherwise: grouped by `rich_help_panel`, "Options" first, in the same colours.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperOption

__all__ = ["print_options"]

_DEFAULT_PANEL = "Options"


def _help_cell(param: Any, ctx: Any) -> Any:
    """The option's help (rich markup, as typer reads it) and then what click adds to it ([env var: ...],
    [default: ...]), as plain text."""
    from rich.text import Text

    from ._usage import flowing

    raw = param.help or ""
    text = Text.from_markup(flowing(raw).replace("\n\n", "\n"), style="")
    record = param.get_help_record(ctx)
    extras = record[1][len(raw) :].strip() if record and record[1].startswith(raw) else ""
    if extras:
        if raw:
            text.append("\n")
        text.append(extras, style="dim")
    text.overflow = "fold"
    return text


def print_options(command: Any, ctx: Any, options: list[Any]) -> None:
    """Prints `options` (the command's visible options) in panels."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    panels: dict[str, list[Any]] = {_DEFAULT_PANEL: []}
    for param in options:
        panels.setdefault(getattr(param, "rich_help_panel", None) or _DEFAULT_PANEL, []).append(param)
    console = Console(highlight=False)
    required = any(p.required for p in options)
    for name, params in panels.items():
        if not params:
            continue
        table = Table(show_header=False, expand=True, box=None, padding=(0, 1), pad_edge=False)
        if required:
            table.add_column(no_wrap=True, style="red")
        table.add_column(no_wrap=True, style="bold cyan")  # --long, and its --no- form below
        table.add_column(no_wrap=True, style="bold green")  # -s
        table.add_column(style="bold yellow")  # the placeholder
        table.add_column(ratio=1, overflow="fold")
        for param in params:
            longs = [o for o in param.opts if o.startswith("--")]
            shorts = [o for o in param.opts if not o.startswith("--")]
            longs_off = [o for o in param.secondary_opts if o.startswith("--")]
            shorts_off = [o for o in param.secondary_opts if not o.startswith("--")]
            names = ",".join(longs) + ("\n" + ",".join(longs_off) if longs_off else "")
            short = ",".join(shorts) + ("\n" + ",".join(shorts_off) if shorts_off else "")
            placeholder = param.display_type_rich(ctx=ctx) if isinstance(param, TyperOption) else ""
            row = [Text(names), Text(short), Text(placeholder or ""), _help_cell(param, ctx)]
            if required:
                row.insert(0, Text("*" if param.required else ""))
            table.add_row(*row)
        console.print(Panel(table, border_style="dim", title=name, title_align="left"))
