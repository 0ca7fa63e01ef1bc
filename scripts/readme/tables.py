"""Small helpers the generated blocks share: tables from column specs, links,
number formats."""
import textwrap

from .inputs import relative


# Prepended to link targets: "../" while rendering a block for a file under docs/.
LINK_BASE = ""


def link(path, short=True):
    """A Markdown link to a committed file (its path from the repository root; `short`: its name)."""
    rel = relative(path)
    return f"[`{rel.rsplit('/', 1)[-1] if short else rel}`]({LINK_BASE}{rel})"


def table(columns, rows):
    """A Markdown table: columns are (header, cell(row) -> str) pairs."""
    lines = ["| " + " | ".join(h for h, _ in columns) + " |",
             "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row) for _, cell in columns) + " |")
    return "\n".join(lines)


def field(key, fmt, missing=""):
    """A column cell: row[key] formatted with `fmt` (a format spec or a callable)."""
    def cell(row):
        if key not in row or row[key] is None:
            return missing
        return fmt(row[key]) if callable(fmt) else format(row[key], fmt)
    return cell


def span(values, fmt, sep="–"):
    """'a–b' of the smallest and largest value (one value if they print alike)."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}{sep}{hi}"


def series(items, last_sep=" and "):
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + last_sep + items[-1]


def wrap(text, width=115):
    """Hard-wraps the paragraphs of a block (tables, headings, lists, their indented lines and comments stay)."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width or line.startswith(("|", "#", "- ", " ", "<!--", "![")):
            out.append(line)
        else:
            out.append(textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)
