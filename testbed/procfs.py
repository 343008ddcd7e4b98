"""What the kernel says of the processes we start, read from /proc: their children, CPU time,
memory, sockets, and the UDP socket queues and drops.

CPU time from schedstat is in nanoseconds and measured at every context switch; /proc/<pid>/stat
and /proc/stat count in clock ticks, sampled, so they serve as hints or where nothing finer
exists (idle time of a CPU). All of it is Linux only, like the testbed and the benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


# -- CPU time --------------------------------------------------------------------------------------
def cpu_ns(pid: int) -> int:
    """Time on CPU (user + system) of a process's main thread, from /proc/<pid>/schedstat."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def process_cpu_ns(pid: int) -> tuple[int, int]:
    """(time on a CPU, time runnable but waiting for one) summed over every live thread of a
    process, from /proc/<pid>/task/*/schedstat. The wait is how much others (or its own
    threads) delayed it."""
    on_cpu = waiting = 0
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
                on_cpu += int(fields[0])
                waiting += int(fields[1])
    return on_cpu, waiting


def user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process (/proc/<pid>/stat, clock-tick resolution): where
    its time goes, Python or the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS_PER_S, int(fields[12]) / CLOCK_TICKS_PER_S


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS in /proc/<pid>/status); 0 if it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_idle_s() -> dict[int, float]:
    """Per CPU idle + iowait seconds from /proc/stat. Busy = wall - idle: with a tickless
    kernel idle time is measured at idle entry and exit, while user/system time is sampled at
    ticks, which misses much of a load that runs in short bursts every 20 ms."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *cols = line.split()
        if name.startswith("cpu") and name != "cpu":
            out[int(name[3:])] = (int(cols[3]) + int(cols[4])) / CLOCK_TICKS_PER_S
    return out


def core_pct(cpu_ns_spent: float, wall_s: float) -> float:
    """CPU time spent over a window, in % of one core."""
    return 100.0 * cpu_ns_spent / 1e9 / wall_s


# -- UDP sockets -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class UdpSocketRow:
    """One socket of /proc/net/udp{,6}."""

    local: str  # the local address as the kernel spells it, e.g. "0100007F:0D96"
    queued_bytes: int  # rx_queue: the truesize of every queued skb
    drops: int
    inode: str

    @property
    def port(self) -> int:
        return int(self.local.rsplit(":", 1)[1], 16)


UDP_TABLES = ("/proc/net/udp", "/proc/net/udp6")


def udp_socket_rows(tables: tuple[str, ...] = UDP_TABLES) -> Iterator[UdpSocketRow]:
    """The UDP sockets of this network namespace (a table that cannot be read is skipped)."""
    for table in tables:
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                queued = int(cols[4].split(":")[1], 16)
                yield UdpSocketRow(cols[1], queued, int(cols[-1]), cols[9])


@dataclass(frozen=True)
class UdpPortStats:
    queued_bytes: int  # rx_queue: the truesize of every queued skb
    drops: int


def udp_key(address: tuple[str, int]) -> str:
    """An IPv4 address as /proc/net/udp spells it: the address word in host byte order, in hex."""
    word = int.from_bytes(socket.inet_aton(address[0]), sys.byteorder)
    return f"{word:08X}:{address[1]:04X}"


def udp_sockets() -> dict[str, UdpPortStats]:
    """Receive queue and drops of the IPv4 UDP sockets, summed per local address (sockets of a
    SO_REUSEPORT group, like the relay's workers, share theirs)."""
    table: dict[str, UdpPortStats] = {}
    for row in udp_socket_rows(UDP_TABLES[:1]):
        old = table.get(row.local, UdpPortStats(0, 0))
        table[row.local] = UdpPortStats(old.queued_bytes + row.queued_bytes, old.drops + row.drops)
    return table


def udp_drops(port: int) -> int:
    """Datagrams the kernel dropped at a UDP socket bound to ``port`` (/proc/net/udp{,6})."""
    return sum(row.drops for row in udp_socket_rows() if row.port == port)


# -- Processes and their sockets -------------------------------------------------------------------
def children_of(pid: int) -> list[int]:
    """The live children of ``pid``, from /proc/<pid>/task/*/children: those of its main thread
    first, in the kernel's order (a relay's workers by index); [] if it is gone."""
    try:
        tasks = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return []
    found: list[int] = []
    for tid in sorted(tasks, key=lambda t: t != pid):
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``: its children, theirs, and so on."""
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children_of(pending.pop()):
            found.append(child)
            pending.append(child)
    return found


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets ``pid`` holds open (/proc/PID/fd)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def tcp_listener_inodes(port: int) -> set[str]:
    """The inodes of TCP sockets listening on ``port`` (/proc/net/tcp{,6}, state 0A)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                    inodes.add(fields[9])
    return inodes
