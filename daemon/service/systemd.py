"""sd_notify over $NOTIFY_SOCKET: one datagram per message; a no-op when not under systemd."""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        # A leading "@" names a socket in the abstract namespace.
        self._address = "\0" + address[1:] if address and address.startswith("@") else address

    def send(self, *fields: str) -> bool:
        """Send `KEY=value` lines as one datagram. False if systemd is not listening."""
        if not self._address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self._address)
                sock.sendall("\n".join(fields).encode())
            return True
        except OSError:
            return False

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) match the reload; 252 ignores it.
        return self.send("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings: half of systemd's WatchdogSec, or None if not asked."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(0.1, int(usec) / 2e6)
    except ValueError:
        return None
