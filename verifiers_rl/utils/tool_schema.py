"""Python callables → tool definitions (`vf.Tool`: name, description, JSON-schema parameters).

The schema is what verifiers 0.1.11 shows a model for the same function: a pydantic model from the type hints,
parameters described from the docstring (Google, Sphinx or NumPy style), made "strict" as OpenAI expects.
"""


from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Callable, Iterable

from pydantic import BaseModel, Field, TypeAdapter, create_model
from pydantic.fields import FieldInfo

from verifiers_rl.types import Tool


_PARAM_SECTIONS = {"args", "arguments", "params", "parameters"}
_SECTION_RE = re.compile(r"^([A-Za-z][\w \t-]*):\s*$")
_GOOGLE_ITEM_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


# --- docstrings ---------------------------------------------------------------------------------------------
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_section_header(lines: list[str], i: int) -> bool:
    """`Title:` on its own line, followed by a more indented block (Google style)."""
    if not _SECTION_RE.match(lines[i]) or _indent(lines[i]) != 0:
        return False
    nxt = next((ln for ln in lines[i + 1:] if ln.strip()), None)
    return nxt is not None and _indent(nxt) > 0


def _google_items(block: list[str]) -> dict[str, str]:
    """`name (type): text` entries of one section block; deeper-indented lines continue the entry."""
    items: dict[str, str] = {}
    base = min((_indent(ln) for ln in block if ln.strip()), default=0)
    current = None
    for line in block:
        if not line.strip():
            continue
        m = _GOOGLE_ITEM_RE.match(line.strip())
        if _indent(line) == base and m:
            current = m.group(1)
            items[current] = m.group(2).strip()
        elif current is not None:
            items[current] = (items[current] + "\n" + line.strip()).strip()
    return items


def _parse_google(lines: list[str]) -> tuple[str, dict[str, str]]:
    """The text before the first section, and the entries of every parameter section."""
    params: dict[str, str] = {}
    first_section = None
    i = 0
    while i < len(lines):
        if not _is_section_header(lines, i):
            i += 1
            continue
        first_section = i if first_section is None else first_section
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > 0):
            j += 1
        if lines[i].strip()[:-1].strip().lower() in _PARAM_SECTIONS:
            params.update(_google_items(lines[i + 1:j]))
        i = j
    return "\n".join(lines[:first_section]).strip(), params


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A docstring's description (the text before its first section) and its parameter descriptions."""
    if not doc or not doc.strip():
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    if any(_SPHINX_PARAM_RE.match(ln.strip()) for ln in lines):
        return _parse_sphinx(lines)
    for i in range(len(lines) - 1):
        if lines[i].strip().lower() == "parameters" and set(lines[i + 1].strip()) == {"-"}:
            return _parse_numpy(lines, i)
    return _parse_google(lines)


def _parse_sphinx(lines: list[str]) -> tuple[str, dict[str, str]]:
    params: dict[str, str] = {}
    text: list[str] = []
    current = None
    for line in lines:
        stripped = line.strip()
        m = _SPHINX_PARAM_RE.match(stripped)
        if m:
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif stripped.startswith(":"):
            current = None
        elif current is not None and stripped:
            params[current] += "\n" + stripped
        elif not params and current is None:
            text.append(line)
    return "\n".join(text).strip(), params


def _parse_numpy(lines: list[str], start: int) -> tuple[str, dict[str, str]]:
    params: dict[str, str] = {}
    current = None
    for line in lines[start + 2:]:
        if not line.strip():
            continue
        if _indent(line) == 0:
            if set(line.strip()) == {"-"}:  # the underline of the next section: its title was no parameter
                params.pop(current or "", None)
                break
            current = line.split(":", 1)[0].strip()
            params[current] = ""
        elif current is not None:
            params[current] = (params[current] + "\n" + line.strip()).strip()
    return "\n".join(lines[:start]).strip(), params


# --- JSON schema --------------------------------------------------------------------------------------------
def _type_hints(func: Callable) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:  # an unresolvable forward reference: take what resolves, one annotation at a time
        hints: dict[str, Any] = {}
        namespace = getattr(func, "__globals__", {})
        for name, ann in getattr(func, "__annotations__", {}).items():
            try:
                hints[name] = eval(ann, namespace) if isinstance(ann, str) else ann  # noqa: S307
            except Exception:
                hints[name] = Any
        return hints


def _schema_able(ann: Any) -> bool:
    try:
        TypeAdapter(ann).json_schema()
        return True
    except Exception:
        return False


def _fields(func: Callable, skip: Iterable[str], arg_desc: dict[str, str]) -> dict[str, Any]:
    """pydantic field definitions, one per parameter the model fills in."""
    skipped = set(skip)
    hints = _type_hints(func)
    fields: dict[str, Any] = {}
    for i, (name, p) in enumerate(inspect.signature(func).parameters.items()):
        if name in skipped or (i == 0 and name in ("self", "cls") and p.annotation is p.empty):
            continue
        ann = hints.get(name, p.annotation)
        ann = Any if ann is p.empty or not _schema_able(ann) else ann  # an opaque type shows as "anything"
        desc = arg_desc.get(name)
        if desc is None:  # none in the docstring: an `Annotated[..., Field(description=...)]` one stays
            desc = _annotated_description(ann)
        if p.kind is p.VAR_POSITIONAL:
            fields[name] = (list[ann], Field(default_factory=list, description=desc))  # type: ignore[valid-type]
        elif p.kind is p.VAR_KEYWORD:
            fields[name] = (dict[str, ann], Field(default_factory=dict, description=desc))  # type: ignore
        elif isinstance(p.default, FieldInfo):
            fields[name] = (ann, p.default)
        elif p.default is p.empty:
            fields[name] = (ann, Field(..., description=desc))
        else:
            fields[name] = (ann, Field(default=p.default, description=desc))
    return fields


def _annotated_description(ann: Any) -> str | None:
    for meta in getattr(ann, "__metadata__", ()):
        if isinstance(meta, FieldInfo) and meta.description:
            return meta.description
    return None


def _strict(node: Any, root: dict[str, Any]) -> Any:
    """OpenAI strict-mode shape, in place: all properties required, closed objects, no null defaults."""
    if not isinstance(node, dict):
        return node
    for key in ("$defs", "definitions"):
        if isinstance(node.get(key), dict):
            for sub in node[key].values():
                _strict(sub, root)
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if isinstance(node.get("properties"), dict):
        node["required"] = list(node["properties"])
        for sub in node["properties"].values():
            _strict(sub, root)
    if isinstance(node.get("items"), dict):
        _strict(node["items"], root)
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [_strict(sub, root) for sub in node["anyOf"]]
    if isinstance(node.get("allOf"), list):
        if len(node["allOf"]) == 1:  # a lone allOf is just its member
            node.update(_strict(node.pop("allOf")[0], root))
        else:
            node["allOf"] = [_strict(sub, root) for sub in node["allOf"]]
    if "default" in node and node["default"] is None:
        del node["default"]
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:  # a $ref with siblings: inline the target under them
        target: Any = root
        for part in ref.removeprefix("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        del node["$ref"]
        merged = {**target, **node}
        node.clear()
        node.update(merged)
        return _strict(node, root)
    return node


def tool_name(func: Any) -> str:
    """The name a tool is called by: its `__name__` (a callable object: its class name)."""
    return getattr(func, "__name__", type(func).__name__)


def function_tool_def(func: Callable, skip: Iterable[str] = ()) -> Tool:
    """The `vf.Tool` for `func`, leaving the parameters named in `skip` out of the schema."""
    name = tool_name(func)
    description, arg_desc = parse_docstring(getattr(func, "__doc__", None))
    model = create_model(f"{name}_args", __base__=BaseModel, **_fields(func, skip, arg_desc))
    schema = model.model_json_schema()
    return Tool(name=name, description=description or "", parameters=_strict(schema, schema))


def tool_schema(func: Callable) -> dict[str, Any]:
    """The same definition in OpenAI's `{"type": "function", "function": {...}}` form (chat templates)."""
    tool = function_tool_def(func)
    return {"type": "function", "function": {"name": tool["name"], "description": tool["description"],
                                             "parameters": tool["parameters"]}}
