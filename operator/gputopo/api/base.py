"""The base model of every API type: camelCase on the wire, snake_case in Python."""

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gputopo.api.group import API_VERSION

__all__ = ["ApiModel", "ApiObject", "NamespacedObject", "NodeObject", "StatusModel"]


class ApiModel(BaseModel):
    """A part of a spec: unknown fields are errors, so a typo is reported with the field's name."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
    )

    def to_api(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    """A part of a status: written by gputopo, read back tolerantly (newer writers may add fields)."""

    model_config = ConfigDict(extra="ignore")


class ApiObject(StatusModel):
    """An object of gputopo's API as read from the API server: its kind, its metadata."""

    kind: ClassVar[str]
    plural: ClassVar[str]
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))


class NodeObject(ApiObject):
    """A cluster-scoped object named after its node, which only that node's probe writes (a status, no spec)."""


class NamespacedObject(ApiObject):
    """A namespaced object of gputopo's API."""

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", "default"))
