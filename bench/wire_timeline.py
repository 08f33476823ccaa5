"""Where a paced stream's first event goes, hop by hop, read off the wire: tcpdump on the loopback interface.

Starts the stack `bench/gateway.py` measures (the simulator, one production gateway worker) and
`bench/reference_proxy.py`'s two kinds in front of the same simulator path, paces the simulator's chunks
(`--pace-ms`, as a model's tokens come), and sends sequential streams to each of the three and to the simulator
directly, in interleaved slices, while tcpdump records every packet of the four ports. From the packets'
kernel timestamps, for each stream through a proxy:

- request in → upstream request out: the proxy's work before it calls the upstream (its wake included),
- the upstream's first event: that request out → the first packet back holding an SSE event (an upstream may
  send its response head alone, first),
- that event → the client's first event: the proxy's work before the client has something to read,
- each later event: an event back from the upstream → the next packet out to the client.

Nothing runs inside the measured processes (strace, a profiler) to slow them: the figures are their own.
"Added over direct" is the first event on the wire through the proxy minus the simulator's own to a client.

    .venv/bin/python bench/wire_timeline.py [--slices 12] [--per-slice 10] [--pace-ms 10] [--save FILE]

A capture taken elsewhere (the side-by-side harness's mock, say: one stream at a time per port) is read with
`--read FILE --upstream PORT --proxy PORT=LABEL ...`.

Needs tcpdump (Debian's package) and the right to capture (root, or CAP_NET_RAW), and Redis as `make bench`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import (
    DIRECT_OPENAI,
    PACE_MS,
    REFERENCE_PROXIES,
    Route,
    _host_port,
    cross_protocol_routes,
    direct_stream_routes,
    free_port,
    machine_note,
    pace,
    prepare,
    stack_env,
    start_reference_proxies,
    start_stack,
    stop_stack,
    ttfb_interleaved,
    zero_first_token,
)

_EVENT = b"data:"


def packets(pcap: bytes) -> list[tuple[float, int, int, bytes]]:
    """(seconds, source port, destination port, payload) of each TCP packet with a payload in a pcap file of
    loopback IPv4 traffic (Linux's `lo`: Ethernet framing with zero addresses)."""
    magic = struct.unpack_from("<I", pcap)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise SystemExit("not a little-endian pcap file")
    scale = 1e-6 if magic == 0xA1B2C3D4 else 1e-9
    link = struct.unpack_from("<I", pcap, 20)[0]
    skip = {1: 14, 113: 16, 0: 4}.get(link)  # Ethernet, Linux cooked, BSD loopback
    if skip is None:
        raise SystemExit(f"unexpected link type {link}")
    out, at = [], 24
    while at + 16 <= len(pcap):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", pcap, at)
        frame = pcap[at + 16 : at + 16 + caplen]
        at += 16 + caplen
        ip = frame[skip:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        tcp = ip[(ip[0] & 15) * 4 :]
        total = struct.unpack_from("!H", ip, 2)[0]
        payload = tcp[(tcp[12] >> 4) * 4 : total - (ip[0] & 15) * 4]
        if payload:
            sport, dport = struct.unpack_from("!HH", tcp)
            out.append((sec + frac * scale, sport, dport, payload))
    return out


@dataclass
class Stream:
    """One stream's payload packets, in seconds: the request in, the upstream request out (a proxy's), the
    upstream's payloads back and the payloads out to the client, each with whether it holds an SSE event
    (an upstream may send its response head alone, before its first event)."""

    front: int
    t_in: float
    t_up: float | None = None
    back: list[tuple[float, bool]] = field(default_factory=list)
    out: list[tuple[float, bool]] = field(default_factory=list)

    def first(self, side: list[tuple[float, bool]]) -> float | None:
        return next((t for t, event in side if event), None)


def streams_of(captured: list[tuple[float, int, int, bytes]], upstream: int, proxies: set[int]) -> list[Stream]:
    """Split the capture into streams. They were sent one at a time, so a payload to a proxy's port starts a
    stream through it; a payload to the upstream's port is that stream's upstream request if it has not sent
    one yet, else a direct stream's request."""
    streams: list[Stream] = []
    current: Stream | None = None
    for t, sport, dport, payload in captured:
        if dport in proxies:
            current = Stream(dport, t)
            streams.append(current)
        elif dport == upstream:
            if current is not None and current.front in proxies and current.t_up is None:
                current.t_up = t
            else:
                current = Stream(upstream, t)
                streams.append(current)
        elif current is None:
            continue
        elif sport == upstream:
            (current.out if current.front == upstream else current.back).append((t, _EVENT in payload))
        elif sport == current.front:
            current.out.append((t, _EVENT in payload))
    return streams


def _later_chunks(stream: Stream) -> list[float]:
    """For each upstream payload after the first: seconds until the next payload out to the client."""
    gaps = []
    events = [t for t, event in stream.back if event]
    for t in events[1:]:
        after = next((o for o, _ in stream.out if o >= t), None)
        if after is not None:
            gaps.append(after - t)
    return gaps


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.3f}" if values else "–"


def report(streams: list[Stream], labels: dict[int, str], upstream: int, skip: int) -> list[str]:
    """The table's rows: medians in ms per path, each path's first `skip` streams left out (a warm-up)."""
    by_front: dict[int, list[Stream]] = {}
    for s in streams:
        complete = s.first(s.out) is not None and (s.front == upstream or s.first(s.back) is not None)
        if complete and (s.front == upstream or s.t_up is not None):
            by_front.setdefault(s.front, []).append(s)
    for front, got in by_front.items():
        by_front[front] = got[skip:]
    direct = [s.first(s.out) - s.t_in for s in by_front.get(upstream, [])]  # type: ignore[operator]
    direct_first = statistics.median(direct) if direct else float("nan")
    rows = [
        "| path | streams | request in → upstream request out | the upstream's first event | that event → "
        "the client's first event | first event on the wire | added over direct | the proxy's own (the first and "
        "third columns) | each later event, upstream → client |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for front, label in labels.items():
        got = by_front.get(front, [])
        if front == upstream:
            rows.append(f"| {label} | {len(got)} | – | {_ms(direct)} | – | {_ms(direct)} | – | – | – |")
            continue
        if not got:
            rows.append(f"| {label} | 0 | | | | | | | |")
            continue
        pre, answer, after, firsts, own = [], [], [], [], []
        for s in got:
            assert s.t_up is not None
            back, out = s.first(s.back), s.first(s.out)
            assert back is not None and out is not None
            pre.append(s.t_up - s.t_in)
            answer.append(back - s.t_up)
            after.append(out - back)
            firsts.append(out - s.t_in)
            own.append((s.t_up - s.t_in) + (out - back))
        later = [gap for s in got for gap in _later_chunks(s)]
        added = (statistics.median(firsts) - direct_first) * 1000
        rows.append(
            f"| {label} | {len(got)} | {_ms(pre)} | {_ms(answer)} | {_ms(after)} | {_ms(firsts)} | {added:.3f} "
            f"| {_ms(own)} | {_ms(later)} |"
        )
    return rows


def capture(ports: list[int], path: Path) -> subprocess.Popen:
    """tcpdump on loopback for `ports`, writing to `path`; returns once it is capturing."""
    expression = " or ".join(f"tcp port {port}" for port in ports)
    proc = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-n", "-s", "2048", "-U", "-w", str(path), expression],
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if b"listening on" not in line:
        proc.kill()
        raise SystemExit(f"tcpdump did not start: {line.decode(errors='replace').strip()}")
    return proc


def settled(path: Path, quiet: float = 1.5, limit: float = 20.0) -> None:
    """Wait until tcpdump has written what the kernel still held for it: the file has not grown for `quiet`
    seconds. The kernel hands captured packets over in blocks, at the latest after libpcap's timeout of 1 s
    (which keeps tcpdump from waking on every packet, as `--immediate-mode` would, among the processes it
    measures); stopped at once, it would lose the last streams' packets."""
    size, deadline = -1, time.monotonic() + limit
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.exists() else 0
        if now == size:
            return
        size = now
        time.sleep(quiet)


def measure(args: argparse.Namespace) -> tuple[list[Stream], dict[int, str], int, str]:
    """Run the stack and the streams under capture; (streams, labels by port, the upstream's port, what the
    client read)."""
    work = Path(tempfile.mkdtemp(prefix="cp-wire-"))
    sim_port, gw_port = free_port(), free_port()
    sim_url, gw_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}"
    namespace = f"bench:{uuid.uuid4().hex[:8]}"
    env = stack_env(work, args.redis_url, namespace)
    key = prepare(env, sim_url)
    procs: list[subprocess.Popen] = []
    try:
        start_stack(env, sim_port=sim_port, gw_port=gw_port, procs=procs)
        reference_urls = start_reference_proxies(env, sim_url, procs)
        zero_first_token(sim_url)
        gateway_route = cross_protocol_routes(key, stream=True)[0]
        targets: list[tuple[str, Route]] = [
            (gw_url, gateway_route),
            *((reference_urls[kind], gateway_route._replace(label=label)) for kind, label in REFERENCE_PROXIES.items()),
            (sim_url, direct_stream_routes()[0]),
        ]
        labels = {_host_port(url)[1]: route.label for url, route in targets}
        ttfb_interleaved(targets, 5, 1)  # connections and pools warm before the capture
        pace(sim_url, args.pace_ms)
        pcap = work / "wire.pcap"
        dump = capture(list(labels), pcap)
        try:
            # Its first round of slices is a warm-up, left out of its figures (and of the table, by `skip`).
            from_client = ttfb_interleaved(targets, args.per_slice, args.slices)
        finally:
            settled(pcap)
            dump.send_signal(signal.SIGINT)
            dump.wait(timeout=30)
        pace(sim_url, 0)
        if args.save:
            shutil.copy(pcap, args.save)
        captured = packets(pcap.read_bytes())
    finally:
        stop_stack(procs, args.redis_url, namespace, work)
    streams = streams_of(captured, sim_port, {port for port in labels if port != sim_port})
    direct = from_client[DIRECT_OPENAI]["event_p50"]
    seen = ", ".join(f"{route.label} {from_client[route.label]['event_p50'] - direct:.3f}" for _, route in targets[:-1])
    return streams, labels, sim_port, f"Added first event as the client read it (the same streams): {seen} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slices", type=int, default=12, help="interleaved slices per path")
    parser.add_argument("--per-slice", type=int, default=10, help="sequential streams per slice")
    parser.add_argument("--pace-ms", type=float, default=PACE_MS, help="ms between the simulator's chunks")
    parser.add_argument("--save", type=Path, help="keep the capture (pcap) here")
    parser.add_argument("--read", type=Path, help="read this capture instead of running the stack")
    parser.add_argument("--upstream", type=int, help="with --read: the upstream's port")
    parser.add_argument("--proxy", action="append", default=[], metavar="PORT=LABEL", help="with --read: a proxy")
    parser.add_argument("--skip", type=int, default=10, help="with --read: first streams per path left out")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()

    if args.read:
        if args.upstream is None or not args.proxy:
            raise SystemExit("--read needs --upstream PORT and at least one --proxy PORT=LABEL")
        labels = {int(port): label for port, _, label in (p.partition("=") for p in args.proxy)}
        labels[args.upstream] = "direct"
        streams = streams_of(packets(args.read.read_bytes()), args.upstream, set(labels) - {args.upstream})
        print("\n".join(report(streams, labels, args.upstream, args.skip)))
        return
    if not shutil.which("tcpdump"):
        raise SystemExit("tcpdump is needed: apt-get install -y tcpdump")
    streams, labels, upstream, seen = measure(args)
    print(f"\nPaced streams on the wire: {args.pace_ms:g} ms between chunks, {args.slices} interleaved slices of ")
    print(f"{args.per_slice} sequential streams per path, medians in ms (tcpdump's kernel timestamps)")
    print(f"Machine: {machine_note()}\n")
    print("\n".join(report(streams, labels, upstream, args.per_slice)))
    print(f"\n{seen}")


if __name__ == "__main__":
    main()
