# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A torch.distributed gloo all-reduce across the nodes of a replica, reported as nccl-tests does.

The multi-node collective of CPU-serving replicas (vLLM's CPU build talks gloo between nodes):
every node runs it at once, rank 0 on the rendezvous (head) address. Each message size is
all-reduced out of place and in place, timed, and the last result checked element by element
against a position-dependent pattern (a misplaced chunk counts as wrong); the rows, the
out-of-bounds count and the average bus bandwidth are printed in all_reduce_perf's layout, so the
interconnect_probe module reads them with the same parser as NCCL and RCCL results.

Exit status: 0, 1 when a value was wrong, 3 when the process group or a collective failed.
The interface comes from GLOO_SOCKET_IFNAME, which the interconnect role derives from the route
to the rendezvous address.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time

HEADER = [
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]
FLOAT_BYTES = 4


def parse_size(text):
    text = text.strip()
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if factor > 1 else text) * factor)


def time_str(usec):
    if usec >= 10000.0:
        return "%7.0f" % usec
    return ("%7.1f" if usec >= 100.0 else "%7.2f") % usec


def sizes(min_bytes, max_bytes):
    size = max(min_bytes, FLOAT_BYTES)
    while size <= max_bytes:
        yield size
        size *= 2


PATTERN = 251  # element i of rank r holds (i % PATTERN) + r: a misplaced or duplicated chunk is seen


def expected_sum(torch, count, world):
    pattern = (torch.arange(count, dtype=torch.float64) % PATTERN).to(torch.float32)
    return pattern * world + world * (world - 1) / 2.0


def filled(torch, count, rank):
    return (torch.arange(count, dtype=torch.float64) % PATTERN + rank).to(torch.float32)


def measure(torch, dist, size, rank, world, iters, warmup, in_place):
    """(time_us, algbw, busbw, wrong) for one size, as all_reduce_perf computes them.

    gloo reduces in place only. In place: each timed operation reduces a buffer prepared before the
    clock starts. Out of place: each copies the input into an output buffer, then reduces that (the
    copy is what an out-of-place reduction costs with gloo). The last result is checked element by
    element against the sum every rank's pattern must give.
    """
    count = size // FLOAT_BYTES
    source = filled(torch, count, rank)
    buffers = [source.clone() if in_place else torch.empty_like(source) for _buffer_index in range(iters)]
    for _warmup_step in range(warmup):
        dist.all_reduce(source.clone())
    dist.barrier()
    started = time.perf_counter()
    for buffer in buffers:
        if not in_place:
            buffer.copy_(source)
        dist.all_reduce(buffer)
    seconds = (time.perf_counter() - started) / iters
    wrong = int((buffers[-1] != expected_sum(torch, count, world)).sum().item())
    algbw = size / seconds / 1e9
    return seconds * 1e6, algbw, algbw * 2.0 * (world - 1) / world, wrong


def run(args):
    import torch
    import torch.distributed as dist

    host = socket.gethostname()
    dist.init_process_group(
        "gloo", init_method="tcp://%s:%d" % (args.master_addr, args.master_port), rank=args.rank,
        world_size=args.world_size, timeout=datetime.timedelta(seconds=args.timeout))
    print("# nThread 1 nGpus 1 minBytes %d maxBytes %d step: 2(factor) warmup iters: %d iters: %d agg iters: 1 "
          "validation: 1 graph: 0" % (args.min_bytes, args.max_bytes, args.warmup, args.iters))
    print("#")
    print("# Using devices")
    names = [None] * args.world_size
    dist.all_gather_object(names, (host, os.getpid(), os.environ.get("GLOO_SOCKET_IFNAME", "")))
    for rank, (name, pid, ifname) in enumerate(names):
        print("#  Rank %2d Group  0 Pid %6d on %10s device  0 [%s] CPU (gloo)" % (rank, pid, name, ifname or "-"))
    print("# gloo (torch %s)" % torch.__version__)
    print("#")
    for line in HEADER:
        print(line)
    total_wrong, busbw_sum, rows = 0, 0.0, 0
    for size in sizes(args.min_bytes, args.max_bytes):
        results = [measure(torch, dist, size, args.rank, args.world_size, args.iters, args.warmup, in_place)
                   for in_place in (False, True)]
        row = "%12d  %12d  %8s  %6s  %6d" % (size, size // FLOAT_BYTES, "float", "sum", -1)
        for usec, algbw, busbw, wrong in results:
            row += "  %s  %6.2f  %6.2f  %5d" % (time_str(usec), algbw, busbw, wrong)
            total_wrong += wrong
            busbw_sum += busbw
        rows += 2
        print(row, flush=True)
    print("# Out of bounds values : %d %s" % (total_wrong, "FAILED" if total_wrong else "OK"))
    print("# Avg bus bandwidth    : %g" % (busbw_sum / rows if rows else 0.0))
    print("#")
    dist.destroy_process_group()
    return 1 if total_wrong else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, default=29501)
    parser.add_argument("--min-bytes", type=parse_size, default=parse_size("8"))
    parser.add_argument("--max-bytes", type=parse_size, default=parse_size("64M"))
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=60, help="seconds for the rendezvous and each collective")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except Exception as exc:  # the tool's own failure line, as nccl-tests prints "Test NCCL failure"
        print("%s: Test gloo failure: %s: %s" % (socket.gethostname(), type(exc).__name__, " ".join(str(exc).split())),
              flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())
