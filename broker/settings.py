"""Where and how to reach RabbitMQ (DESIGN.md section 7): connection settings, parsed
from an ``amqp://`` URL. Kept apart from ``broker/rabbitmq.py`` (the one module that imports
pika) so that command lines can read settings without loading the client.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RabbitMQSettings:
    """Where and how to connect; see docs/operating.md for the values to use."""

    host: str = "127.0.0.1"
    port: int = 5672
    vhost: str = "/"
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    heartbeat: int = 30
    prefetch: int = 64
    blocked_connection_timeout: float = 30.0
    socket_timeout: float = 5.0
    reconnect_attempts: int = 8
    reconnect_initial_delay: float = 0.2
    reconnect_max_delay: float = 10.0

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> RabbitMQSettings:
        """Settings from ``amqp://user:password@host:port/vhost`` (vhost percent-encoded)."""
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "amqp":
            raise ValueError(f"only amqp:// URLs are supported, not {parsed.scheme!r}")
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        values: dict[str, Any] = {
            "host": parsed.hostname or "127.0.0.1",
            "port": parsed.port or 5672,
            "vhost": urllib.parse.unquote(path) if path else "/",
            "username": urllib.parse.unquote(parsed.username or "guest"),
            "password": urllib.parse.unquote(parsed.password or "guest"),
        }
        values.update(overrides)
        return cls(**values)
