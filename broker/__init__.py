"""fedrank's wire (DESIGN.md sections 1, 5 and 7): message schemas and codec, topology,
transports over RabbitMQ and in memory, the consuming edge, broker provisioning.

Importing the package registers every protocol message kind (``broker.messages``), so
``broker.codec.decode`` knows them all whichever module a caller imports first.
"""

from broker import messages as messages
