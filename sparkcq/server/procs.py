"""The processes of a running service, from Linux's /proc: the Python process, Spark's JVM
beside it, their resident memory and the TCP ports they listen on. ``/status`` reports the
memory; tests and the load benchmark check the ports and follow the memory over time.
Elsewhere than Linux every function answers empty.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

PROC = Path("/proc")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in PROC.glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (0 when it is gone)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in (PROC / str(pid) / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    except OSError:
        pass
    return out


def _address(hex_addr: str) -> tuple[str, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(host, 16)))
    else:
        words = struct.unpack("<4I", raw)
        ip = socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
    return ip, int(port, 16)


def listening(pids: list[int]) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket the processes listen on."""
    inodes = set().union(*(_socket_inodes(p) for p in pids)) if pids else set()
    out = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # 0A: LISTEN
                out.append(_address(parts[1]))
    return sorted(out)
