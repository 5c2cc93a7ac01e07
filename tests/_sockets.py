"""Listening TCP sockets of given processes, from /proc (Linux), for the rendezvous test."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

LISTEN = "0A"


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    except OSError:
        pass
    return out


def _addr(hexaddr: str, v6: bool) -> str:
    raw = bytes.fromhex(hexaddr)
    if not v6:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) for every TCP socket in LISTEN state held by ``pids``."""
    owner = {}
    for pid in pids:
        for ino in _socket_inodes(pid):
            owner[ino] = pid
    found = []
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], parts[9]
            if state != LISTEN or inode not in owner:
                continue
            host, port = local.split(":")
            found.append((owner[inode], _addr(host, v6), int(port, 16)))
    return found


def children(pid: int) -> list[int]:
    """All descendants of ``pid``."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out
