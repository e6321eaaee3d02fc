"""Client tools the Python way: a decorator on a typed function.

    @tool
    async def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b

The declaration sent in ``hello.tools`` (§5.2) is built from the function: its name,
the first paragraph of its docstring, and a JSON Schema of its parameters made from
the type hints (anything msgspec understands: builtins, Literal, Enum, dataclasses,
TypedDict, msgspec Structs). Arguments are validated against that schema before the
function runs (§7.1: ``INVALID`` otherwise). A parameter annotated
:class:`ToolContext` receives the call's ids, epoch and cancellation token instead of
an argument.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import jsonschema_rs
import msgspec

from ..errors import VrtException
from ..protocol.messages import UNSET, FailureCode, Tool

__all__ = ["CancelToken", "ClientTool", "ToolContext", "ToolError", "declared_tool", "tool"]


class ToolError(VrtException):
    """Raise from a tool to answer with a specific failure code (§7.3), e.g. REJECTED."""

    def __init__(self, code: FailureCode, message: str) -> None:
        super().__init__(message)
        self.code: FailureCode = code
        self.message = message


class CancelToken:
    """Set when the call's epoch closes (§7.2). Check it before committing an effect:
    cancellation cannot undo what already happened, so a tool must be atomic."""

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise asyncio.CancelledError("the tool call was interrupted")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may ask for about the call (§7.1)."""

    call_id: str
    turn_id: str
    epoch: int
    cancel: CancelToken = field(default_factory=CancelToken)


@dataclass(frozen=True)
class ClientTool:
    """A tool the client hosts: its declaration and how to run it."""

    declaration: Tool
    function: Callable[..., Any]
    arguments_type: type[msgspec.Struct] | None
    context_parameter: str | None
    validator: jsonschema_rs.Validator | None

    @property
    def name(self) -> str:
        return self.declaration.name

    def check(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not fit the declared ``parameters``; None when they do."""
        if self.validator is None:
            return None
        errors = list(self.validator.iter_errors(arguments))
        if not errors:
            return None
        first = errors[0]
        where = "/".join(str(p) for p in first.instance_path)
        return f"{where}: {first.message}" if where else first.message

    async def run(self, arguments: Any, context: ToolContext) -> Any:
        """Call the function; a sync one runs in a thread so the session keeps going."""
        kwargs: dict[str, Any] = {}
        if self.arguments_type is not None:
            parsed = msgspec.convert(arguments, self.arguments_type, strict=False)
            kwargs = {name: getattr(parsed, name) for name in parsed.__struct_fields__}
        elif isinstance(arguments, dict):
            kwargs = dict(arguments)
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**kwargs)
        result = await asyncio.to_thread(self.function, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def _description(function: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(function)
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip() if doc else None


def _parameters(
    function: Callable[..., Any],
) -> tuple[dict[str, Any], type[msgspec.Struct] | None, str | None]:
    hints = get_type_hints(function, include_extras=True)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    context_parameter = None
    for name, parameter in inspect.signature(function).parameters.items():
        annotation = hints.get(name, Any)
        if annotation is ToolContext:
            context_parameter = name
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {function.__name__}: *args and **kwargs cannot be declared")
        if parameter.default is inspect.Parameter.empty:
            fields.append((name, annotation))
        else:
            fields.append((name, annotation, parameter.default))
    struct = msgspec.defstruct(f"{function.__name__}_arguments", fields, forbid_unknown_fields=True)
    schema = msgspec.json.schema(struct)
    definitions = schema.pop("$defs", {})
    top = definitions.pop(struct.__name__)
    top.pop("title", None)
    if definitions:
        top["$defs"] = definitions  # "#/$defs/..." references now resolve inside ``top``
    return top, struct, context_parameter


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Declare a function as a client tool; usable bare (``@tool``) or with a name."""

    def wrap(target: Callable[..., Any]) -> ClientTool:
        parameters, struct, context_parameter = _parameters(target)
        declaration = Tool(
            name=name or target.__name__,
            description=description or _description(target) or UNSET,
            parameters=parameters,
        )
        return ClientTool(
            declaration=declaration,
            function=target,
            arguments_type=struct,
            context_parameter=context_parameter,
            validator=jsonschema_rs.validator_for(parameters),
        )

    return wrap(function) if function is not None else wrap


def declared_tool(declaration: Tool, function: Callable[..., Any | Awaitable[Any]]) -> ClientTool:
    """A tool from a hand-written declaration; ``function`` takes the arguments as
    keyword arguments (plus ``context`` if it declares a ToolContext parameter)."""
    hints = get_type_hints(function)
    context_parameter = next((n for n, h in hints.items() if h is ToolContext), None)
    parameters = declaration.parameters
    validator = jsonschema_rs.validator_for(parameters) if isinstance(parameters, dict) else None
    return ClientTool(declaration, function, None, context_parameter, validator)
