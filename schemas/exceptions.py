"""Errors raised while turning bytes into events."""


class SchemaError(ValueError):
    """Base class: the bytes are not a valid KernelZero event."""


class DecodeError(SchemaError):
    """The bytes are not a JSON object at all."""


class UnknownEventType(SchemaError):
    """The envelope names an event type no schema registers."""


class ValidationFailed(SchemaError):
    """The JSON does not satisfy the envelope or payload model."""
