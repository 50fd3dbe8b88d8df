"""The compiler's one error type: names the element, the attribute, the file and the line."""

from __future__ import annotations


class MJCFError(ValueError):
    """Bad or unsupported MJCF input.

    Attributes:
      element: the XML tag concerned (or None).
      attribute: the attribute concerned (or None).
      file: the file the element came from (or None for strings).
      line: the line in that file (or None).
    """

    def __init__(self, message: str, element=None, attribute: str | None = None,
                 file: str | None = None, line: int | None = None):
        tag = None
        if element is not None and hasattr(element, "tag"):
            tag = element.tag if isinstance(element.tag, str) else None
            src = element.get("_src") if hasattr(element, "get") else None
            if src and file is None:
                file, _, ln = src.rpartition(":")
                line = line if line is not None else int(ln)
            elif line is None and getattr(element, "sourceline", None):
                line = element.sourceline
            name = element.get("name") if hasattr(element, "get") else None
            if name:
                tag = f"{tag} '{name}'"
        elif isinstance(element, str):
            tag = element
        self.element, self.attribute, self.file, self.line = tag, attribute, file, line
        self.message = message
        where = []
        if file:
            where.append(f"{file}:{line}" if line else file)
        elif line:
            where.append(f"line {line}")
        what = []
        if tag:
            what.append(f"<{tag}>")
        if attribute:
            what.append(f"attribute '{attribute}'")
        prefix = ", ".join(where + [" ".join(what)] if what else where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
