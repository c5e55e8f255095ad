"""Errors of the shared runtime (config, broker, topics)."""


class KernelZeroError(Exception):
    """Base of every error the `kz` CLI reports as one clear line."""


class ConfigError(KernelZeroError):
    """A setting is missing, malformed or inconsistent."""


class BrokerUnavailable(KernelZeroError):
    """No Kafka broker answers at the configured address."""


class EmbeddedBrokerError(KernelZeroError):
    """The embedded Tansu broker could not be started or stopped."""
