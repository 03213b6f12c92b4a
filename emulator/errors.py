"""Errors the emulator raises before any host starts, and while a job runs."""

from __future__ import annotations


class EmulatorError(Exception):
    """Base class of every error the emulator raises on purpose."""


class RequestError(EmulatorError, ValueError):
    """A job request is malformed. Raised before anything is written or started.

    ``field`` names the request field (CreateTrainingJob spelling where one exists, e.g.
    ``ResourceConfig.InstanceCount``) so front ends can point at the user's own argument.
    """

    def __init__(self, field: str, problem: str, *, allowed: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        text = f"{field}: {problem}"
        if allowed:
            text += f" (allowed: {allowed})"
        super().__init__(text)


class BackendUnavailable(EmulatorError, RuntimeError):
    """The chosen backend cannot run on this machine; the message says why and what to try."""


class Terminated(KeyboardInterrupt):
    """The emulator got SIGTERM (the CLI turns it into this): handled like Ctrl-C — hosts stopped,
    ``job.json`` written with ``Stopped``, temp tree removed."""
