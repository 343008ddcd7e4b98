"""The ``grpc`` backend: calls answered by a service over gRPC, our protocol in protobuf.

``v1/backend.proto`` is the protocol (package ``rtcedge.backend.v1``; its generated Python beside
it, checked in: docs/backend-protocol.md, "The gRPC protocol"), ``protocol`` decides (sans-I/O:
the messages, what a backend may send), ``backend`` moves the bytes with grpcio, ``config`` is
checked at start. Only ``backend`` imports grpc: this package's import needs none of it.
"""

from transceiver.backends.grpc.config import CallLimits, GrpcBackendConfig

__all__ = ["CallLimits", "GrpcBackendConfig"]
