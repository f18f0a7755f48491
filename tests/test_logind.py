"""The real node's logind (localcluster/logind.py) on a real dbus-daemon, spoken to as the kubelet's graceful node
shutdown speaks to it (k8s.io/kubernetes pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go): the property it
compares with its shutdownGracePeriod, a delay lock, PrepareForShutdown; and PowerOff as `systemctl poweroff` calls it."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from jeepney import DBusAddress, DBusErrorResponse, HeaderFields, MatchRule, Properties, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection
from jeepney.wrappers import unwrap_msg

from localcluster import logind
from tests.promql import under_ci

MANAGER = DBusAddress(logind.PATH, bus_name=logind.SERVICE, interface=logind.MANAGER)


@pytest.fixture
def bus(tmp_path) -> Iterator[str]:
    if shutil.which("dbus-daemon") is None:
        if under_ci():
            pytest.fail("dbus-daemon not on PATH, and CI=true requires it: apt-get install dbus-daemon", pytrace=False)
        pytest.skip("dbus-daemon not installed: apt-get install dbus-daemon")
    socket = tmp_path / "bus"
    (tmp_path / "bus.conf").write_text(logind.bus_config([str(socket)]))
    daemon = subprocess.Popen(["dbus-daemon", f"--config-file={tmp_path / 'bus.conf'}", "--nofork", "--nopidfile"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 10
    while not socket.is_socket():
        assert time.monotonic() < deadline, "dbus-daemon made no socket"
        time.sleep(0.05)
    yield f"unix:path={socket}"
    daemon.kill()
    daemon.wait()


def _kubelet(address: str) -> DBusConnection:
    """A connection as the kubelet's: its delay lock taken, PrepareForShutdown matched."""
    connection = open_dbus_connection(address, enable_fds=True)
    rule = MatchRule(type="signal", interface=logind.MANAGER, member="PrepareForShutdown", path=logind.PATH)
    connection.send_and_get_reply(message_bus.AddMatch(rule))
    return connection


def _power_off(address: str) -> None:
    with open_dbus_connection(address) as caller:
        caller.send_and_get_reply(new_method_call(MANAGER, "PowerOff", "b", (False,)))


def _signal(connection: DBusConnection) -> tuple:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        message = connection.receive(timeout=5)
        if message.header.fields.get(HeaderFields.member) == "PrepareForShutdown":
            return message.body
    raise AssertionError("no PrepareForShutdown")


def _until(offs: list[float], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not offs and time.monotonic() < deadline:
        time.sleep(0.02)


def test_power_off_waits_for_the_kubelets_delay_lock(bus):
    offs: list[float] = []
    server = logind.Logind(bus, delay_s=30, power_off=lambda: offs.append(time.monotonic()), say=lambda _: None)
    kubelet = _kubelet(bus)
    # What the kubelet reads before it decides whether logind's delay covers its shutdownGracePeriod.
    assert kubelet.send_and_get_reply(Properties(MANAGER).get("InhibitDelayMaxUSec")).body == (("t", 30_000_000),)
    (lock,) = kubelet.send_and_get_reply(new_method_call(MANAGER, "Inhibit", "ssss",
                                                         ("shutdown", "kubelet", "Kubelet needs time", "delay"))).body  # fmt: skip
    _power_off(bus)
    assert _signal(kubelet) == (True,)
    time.sleep(0.5)
    assert offs == [], "the power went while the kubelet still held its delay lock"
    released = time.monotonic()
    lock.close()
    _until(offs, 2)
    assert offs and offs[0] - released < 1, "the power did not go once the lock was released"
    server.close()
    kubelet.close()


def test_a_lock_never_released_holds_the_power_off_for_the_delay_only(bus):
    offs: list[float] = []
    server = logind.Logind(bus, delay_s=0.6, power_off=lambda: offs.append(time.monotonic()), say=lambda _: None)
    kubelet = _kubelet(bus)
    (lock,) = kubelet.send_and_get_reply(new_method_call(MANAGER, "Inhibit", "ssss", ("shutdown", "kubelet", "why", "delay"))).body
    asked = time.monotonic()
    _power_off(bus)
    _until(offs, 5)
    assert offs and 0.6 <= offs[0] - asked < 1.5
    lock.close()
    server.close()
    kubelet.close()


def test_what_logind_does_not_serve_is_refused_and_its_name_is_its_alone(bus):
    server = logind.Logind(bus, delay_s=1, power_off=lambda: None, say=lambda _: None)
    with open_dbus_connection(bus) as caller:
        with pytest.raises(DBusErrorResponse, match="UnknownMethod"):
            unwrap_msg(caller.send_and_get_reply(new_method_call(MANAGER, "Reboot", "b", (False,))))
    with pytest.raises(logind.LogindError, match="did not give org.freedesktop.login1"):
        logind.Logind(bus, delay_s=1, power_off=lambda: None, say=lambda _: None)
    server.close()
