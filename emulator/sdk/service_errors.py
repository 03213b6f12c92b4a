"""The errors the emulator's SageMaker client raises as the service does: botocore's ``ClientError``
with the service's error code and message (what boto3 raises for an error response)."""

from __future__ import annotations


def client_error(code: str, message: str, operation: str) -> Exception:
    """A ``botocore.exceptions.ClientError`` for ``operation`` with ``code`` and ``message``."""
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message}}, operation)
