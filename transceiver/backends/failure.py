"""How a network backend's session fails: once, with a reason, its work stopped, the
transceiver told. Shared by the realtime, media-streams and grpc sessions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class FailsOnce:
    """``_fail(reason)`` for a session whose ``state`` is ``open`` until it fails or closes:
    the first failure is recorded (``close_reason``), logged under ``backend_label``, ends the
    session's own work (``_stop_work``) and reaches the transceiver (``_on_failure``); later
    ones are ignored."""

    backend_label: str
    state: str
    close_reason: str | None
    info: Any  # transceiver.backend.SessionInfo
    _on_failure: Callable[[str], None]

    def _fail(self, reason: str) -> None:
        """Report the first failure of an open session to the transceiver; stop moving data."""
        if self.state != "open":
            return
        self.state = "failed"
        self.close_reason = reason
        log.warning("session %s: %s backend: %s", self.info.session_id, self.backend_label, reason)
        self._stop_work()
        try:
            self._on_failure(reason)
        except Exception:
            log.exception("session %s: on_failure failed", self.info.session_id)

    def _stop_work(self) -> None:
        raise NotImplementedError


def cancel_others(*tasks: asyncio.Task[Any]) -> None:
    """Cancel the session's tasks but the one running (which is failing it)."""
    current = asyncio.current_task()
    for task in tasks:
        if task is not current:
            task.cancel()
