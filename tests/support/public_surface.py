"""The SDK's public surface as text: every name in `payloadstore.__all__` and
`payloadstore.aio.__all__`, with its kind and signature, and for a class every public method,
property and attribute with its own.

tests/packaging/test_public_surface.py compares it with the recorded listing
(tests/packaging/public_surface.txt). A change of the surface is a decision: record it with

    .venv/bin/python -m tests.support.public_surface > tests/packaging/public_surface.txt

and say in the commit why users gain from it.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
from collections.abc import Iterator


def _signature(obj) -> str:
    try:
        # a default's repr may carry an address (`<built-in method random ... at 0x...>`)
        return re.sub(r" at 0x[0-9a-f]+", "", str(inspect.signature(obj)))
    except (TypeError, ValueError):  # a builtin or a C type without text signature
        return "(...)"


def _kind(obj) -> str:
    if inspect.iscoroutinefunction(obj):
        return "async def"
    if inspect.isasyncgenfunction(obj):
        return "async def (generator)"
    return "def"


def _members(cls: type) -> Iterator[str]:
    for name in sorted(vars(cls) if issubclass(cls, BaseException) else dir(cls)):
        if name.startswith("_") and name not in (
            "__init__",
            "__call__",
            "__enter__",
            "__exit__",
            "__aenter__",
            "__aexit__",
            "__iter__",
            "__aiter__",
            "__await__",
        ):
            continue
        if issubclass(cls, BaseException) and name == "__init__" and "__init__" not in vars(cls):
            continue
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner in (object, BaseException, Exception) or (
            owner and owner.__module__ in ("builtins", "enum", "typing", "abc", "collections.abc")
        ):
            continue
        if isinstance(attr, property):
            yield f"  property {name}"
        elif isinstance(attr, staticmethod | classmethod):
            fn = attr.__func__
            yield f"  {type(attr).__name__} {_kind(fn)} {name}{_signature(fn)}"
        elif inspect.isfunction(attr):
            yield f"  {_kind(attr)} {name}{_signature(attr)}"
        elif isinstance(attr, enum.Enum):
            yield f"  member {name} = {attr.value!r}"
        else:
            yield f"  attribute {name}"


def _describe(module_name: str, name: str, obj) -> Iterator[str]:
    where = f"{module_name}.{name}"
    if inspect.isclass(obj):
        # Bases are left out (a refactor may change them); what a caller meets is listed.
        exception = issubclass(obj, BaseException)
        kind = "exception" if exception else "class"
        yield f"{kind} {where}{'' if exception else _signature(obj)}"
        fields = getattr(obj, "__dataclass_fields__", None)
        if fields:
            for field_name in fields:
                yield f"  field {field_name}: {fields[field_name].type}"
        yield from _members(obj)
    elif callable(obj):
        yield f"{_kind(obj)} {where}{_signature(obj)}"
    else:
        yield f"value {where} = {obj!r}"


def listing() -> str:
    lines: list[str] = []
    for module_name in ("payloadstore", "payloadstore.aio"):
        module = importlib.import_module(module_name)
        lines.append(f"# {module_name}.__all__: {len(module.__all__)} names")
        for name in sorted(module.__all__):
            lines.extend(_describe(module_name, name, getattr(module, name)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(listing(), end="")
