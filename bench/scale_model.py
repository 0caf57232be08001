#!/usr/bin/env python3
"""The model of docs/SCALE.md: N ranks each saving S bytes to AWS S3 through s3flash.dcp.
Prints the tables of docs/SCALE.md; every parameter is an option (defaults and their sources
in docs/SCALE.md), so a measured per-connection rate or another part size re-derives them:

    python3 bench/scale_model.py
    python3 bench/scale_model.py --conn-mbs 85 --part-mib 64 --host-gbit 400
"""
import argparse
import math

MB = 1e6
MiB = 1 << 20


def per_rank(a):
    """Bytes/s one rank can move: its requests in flight times one connection's rate, or its
    share of the host's link, whichever is less."""
    return min(a.inflight * a.conn_mbs * MB, a.host_gbit * 1e9 / 8 / a.ranks_per_host)


def requests(a, size):
    """Requests of one rank's save: a multipart upload of one object (DCP's default
    thread_count=1): Create, the parts, Complete. (A size under one part is one PUT.)"""
    parts = math.ceil(size / (a.part_mib * MiB))
    return parts + 2 if parts > 1 else 1


def row(a, ranks, size, prefixes):
    t_rank = per_rank(a)
    q = requests(a, size)
    t_free = size / t_rank                              # no throttling: the rank's own pace
    demand = ranks * q / t_free                         # request/s all ranks ask for
    cap = prefixes * a.put_per_prefix
    t = max(t_free, ranks * q / cap)                    # the prefixes admit `cap` per second
    need = math.ceil(demand / a.put_per_prefix)
    return t_rank, q, demand, need, t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conn-mbs", type=float, default=50.0,
                   help="one connection's rate, MB/s (0.4 Gbit/s: s3flash's and the CRT's "
                        "estimate; issue 13's paced sink)")
    p.add_argument("--inflight", type=int, default=25, help="requests in flight per rank "
                   "(s3flash default: ceil(10 Gbit/s / 0.4))")
    p.add_argument("--part-mib", type=float, default=8.0, help="part size (s3flash default)")
    p.add_argument("--host-gbit", type=float, default=100.0, help="a host's link, Gbit/s")
    p.add_argument("--ranks-per-host", type=int, default=8)
    p.add_argument("--put-per-prefix", type=float, default=3500.0, help="AWS, per partitioned "
                   "prefix")
    p.add_argument("--get-per-prefix", type=float, default=5500.0)
    p.add_argument("--memory-mib", type=float, default=512.0, help="memory_limit per client")
    a = p.parse_args()

    t_rank = per_rank(a)
    put_rank = t_rank / (a.part_mib * MiB)
    print(f"per rank: {t_rank / 1e9:.2f} GB/s = {put_rank:.0f} PUT/s of {a.part_mib:g} MiB; "
          f"one prefix carries {a.put_per_prefix / put_rank:.1f} ranks saving, "
          f"{a.get_per_prefix / put_rank:.1f} loading "
          f"({a.put_per_prefix * a.part_mib * MiB / 1e9:.1f} GB/s of PUTs, "
          f"{a.get_per_prefix * a.part_mib * MiB / 1e9:.1f} GB/s of GETs)")
    print(f"per host: {a.ranks_per_host * a.inflight} connections, "
          f"{a.ranks_per_host * t_rank * 8 / 1e9:.0f} of {a.host_gbit:g} Gbit/s, "
          f"at most {a.ranks_per_host * a.memory_mib / 1024:.1f} GiB of buffer pools\n")
    print("| ranks | GB per rank | requests per rank | PUT/s asked | prefixes needed "
          "| s, 1 prefix | s, enough prefixes |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for ranks in (1000, 10000):
        for gb in (1, 10):
            size = gb * 1e9
            _, q, demand, need, t1 = row(a, ranks, size, 1)
            _, _, _, _, tk = row(a, ranks, size, need)
            print(f"| {ranks:,} | {gb} | {q:,} | {demand:,.0f} | {need:,} | {t1:,.0f} "
                  f"| {tk:,.1f} |")


if __name__ == "__main__":
    main()
