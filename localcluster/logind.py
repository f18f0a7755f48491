"""The real node's logind: what of systemd-logind the kubelet's graceful node shutdown talks to, served on
the node's own D-Bus system bus (a real dbus-daemon), so that powering the node off takes the path a GKE Spot
VM's preemption takes: logind announces the shutdown, the kubelet (holding a delay lock) fails its pods with
DisruptionTarget and stops them within its shutdownGracePeriod, releases the lock, and the machine goes off.

What it serves, as org.freedesktop.login1(5) documents it, on /org/freedesktop/login1, interface
org.freedesktop.login1.Manager:
- the property InhibitDelayMaxUSec (t), which the kubelet compares with its shutdownGracePeriod;
- Inhibit(what s, who s, why s, mode s) -> h: a lock held until every copy of the returned descriptor is closed;
- PowerOff(interactive b), what `systemctl poweroff` calls: the signal PrepareForShutdown(true), then a wait
  until every delay lock is released or InhibitDelayMaxUSec has passed, then the power goes (the callback).
Anything else is answered UnknownMethod, as logind answers a method it does not have.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

from jeepney import DBusAddress, HeaderFields, MessageType, new_error, new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection

SERVICE = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"
UNKNOWN_METHOD = "org.freedesktop.DBus.Error.UnknownMethod"
DO_NOT_QUEUE = 4  # RequestName's flag: fail rather than wait for the name
PRIMARY_OWNER = 1


class LogindError(Exception):
    """The node's bus refused logind its name."""


class Logind:
    """logind on the bus at `address` until the power goes off (then `power_off` runs, on a thread of its own)."""

    def __init__(self, address: str, delay_s: float, power_off: Callable[[], None], say: Callable[[str], None] = print):
        self.delay_s = delay_s
        self.power_off = power_off
        self.say = say
        self.locks: list[int] = []  # read ends of the delay locks handed out; EOF when released
        self.shutting_down_since: float | None = None
        self.connection: DBusConnection = open_dbus_connection(address, enable_fds=True)
        reply = self.connection.send_and_get_reply(message_bus.RequestName(SERVICE, DO_NOT_QUEUE))
        if reply.body != (PRIMARY_OWNER,):
            raise LogindError(f"the node's bus did not give {SERVICE} to logind (RequestName answered {reply.body})")
        self.thread = threading.Thread(target=self._serve, name="logind", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.connection.close()
        self.thread.join(timeout=5)
        for fd in self.locks:
            os.close(fd)
        self.locks = []

    def _serve(self) -> None:
        while True:
            try:
                message = self.connection.receive(timeout=0.2)
            except TimeoutError:
                message = None
            except (OSError, ValueError):  # the bus went away (the node is off) or we were closed
                return
            if message is not None and message.header.message_type == MessageType.method_call:
                self._answer(message)
            if self.shutting_down_since is not None and self._may_power_off():
                self.say(f"  logind: powering off {time.monotonic() - self.shutting_down_since:.1f} s after PrepareForShutdown")
                threading.Thread(target=self.power_off, name="power-off", daemon=True).start()
                return

    def _answer(self, message) -> None:
        fields = message.header.fields
        path, interface, member = (fields.get(f) for f in (HeaderFields.path, HeaderFields.interface, HeaderFields.member))
        call = (interface, member) if path == PATH else None
        if call == (PROPERTIES, "Get") and message.body == (MANAGER, "InhibitDelayMaxUSec"):
            self.connection.send(new_method_return(message, "v", (("t", self._delay_usec()),)))
        elif call == (PROPERTIES, "GetAll") and message.body == (MANAGER,):
            self.connection.send(new_method_return(message, "a{sv}", ({"InhibitDelayMaxUSec": ("t", self._delay_usec())},)))
        elif call == (MANAGER, "Inhibit"):
            self._inhibit(message)
        elif call == (MANAGER, "PowerOff"):
            self.connection.send(new_method_return(message))
            if self.shutting_down_since is None:
                self.shutting_down_since = time.monotonic()
                self.say(f"  logind: PowerOff: PrepareForShutdown(true), {len(self.locks)} delay lock(s) held")
                self.connection.send(new_signal(DBusAddress(PATH, interface=MANAGER), "PrepareForShutdown", "b", (True,)))
        else:
            text = f"{interface}.{member} on {path} is not served by this node's logind"
            self.connection.send(new_error(message, UNKNOWN_METHOD, "s", (text,)))

    def _delay_usec(self) -> int:
        return round(self.delay_s * 1_000_000)

    def _inhibit(self, message) -> None:
        what, _who, _why, mode = message.body
        read, write = os.pipe()
        try:
            self.connection.send(new_method_return(message, "h", (write,)))
        finally:
            os.close(write)  # the caller holds the lock now: its copy is the last writer
        if "shutdown" in what.split(":") and mode == "delay":
            self.locks.append(read)
        else:
            os.close(read)  # a lock that never delays a power-off needs no watching here

    def _may_power_off(self) -> bool:
        """True once every delay lock is released (its last writer closed) or the longest delay has passed."""
        if self.locks:
            readable, _, _ = select.select(self.locks, [], [], 0)
            for fd in readable:
                if os.read(fd, 1) == b"":
                    self.locks.remove(fd)
                    os.close(fd)
        assert self.shutting_down_since is not None
        return not self.locks or time.monotonic() - self.shutting_down_since >= self.delay_s


def bus_config(sockets: list[str]) -> str:
    """dbus-daemon's configuration of the node's system bus, listening on each socket path: a machine's bus
    where only root connects (every process of the node is root), without the distribution's service files."""
    listens = "".join(f"  <listen>unix:path={path}</listen>\n" for path in sockets)
    return (
        '<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"\n'
        ' "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">\n'
        "<busconfig>\n  <type>system</type>\n" + listens + "  <auth>EXTERNAL</auth>\n"
        '  <policy context="default">\n    <allow user="root"/>\n    <allow own="*"/>\n'
        '    <allow send_destination="*"/>\n    <allow receive_sender="*"/>\n  </policy>\n</busconfig>\n'
    )
