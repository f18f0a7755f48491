"""What a process tree holds, read from /proc: its descendants and the TCP ports they listen on."""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Running: present in /proc and not a zombie (an exited child nobody has reaped yet)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def descendants(pid: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))):
            parents[int(entry.name)] = stat[1]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _listeners() -> list[tuple[int, str]]:
    """(port, socket inode) of every listening TCP socket (IPv4 and IPv6) on the machine."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == _LISTEN:
                found.append((int(cols[1].rsplit(":", 1)[1], 16), cols[9]))
    return found


def listening_ports(pids: set[int] | None = None) -> set[int]:
    """TCP ports that any of these processes listens on (any process's, without pids)."""
    if pids is None:
        return {port for port, _ in _listeners()}
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return {port for port, inode in _listeners() if inode in inodes}
