"""What ``output_schema`` accepts (``AgentOptions``, ``agent_tool()``): the ``OutputSchema`` type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel

__all__ = ["OutputSchema", "ParseSchema", "ValidateSchema"]


@runtime_checkable
class ValidateSchema(Protocol):
    """A schema object in pydantic's shape: its JSON schema, and a validator."""

    def model_json_schema(self) -> dict[str, Any]: ...

    def model_validate(self, obj: Any) -> Any: ...


@runtime_checkable
class ParseSchema(Protocol):
    """A schema object in the ``parse(input)`` shape, with its JSON schema."""

    def json_schema(self) -> dict[str, Any]: ...

    def parse(self, obj: Any) -> Any: ...


OutputSchema: TypeAlias = type[BaseModel] | Mapping[str, Any] | ValidateSchema | ParseSchema
"""A structured result's schema: a pydantic model class (the result is validated by it), a
JSON-schema dict with ``"type": "object"``, or an object with ``model_json_schema()`` and
``model_validate()`` (or ``json_schema()`` and ``parse()``)."""
