"""A network link between the real nodes of two devclusters (`devcluster.py link --name A --peer
B`), for a federation across clusters: the SuperLink in one, SuperNodes in the other.

Each real node lives in its network namespace `fsc-<n>` (tools/realnode.py). `link` puts a veth
pair between the two namespaces, nothing on the host: in `fsc-<a>` the end `fsl-<b>`, in `fsc-<b>`
the end `fsl-<a>`. Each node gets one link address of its own, `10.202.<n>.1/32`, on each of its
link ends, with a host route to every peer's link address through the link to it. That address is
where other clusters reach the node: a NodePort Service answers there (kube-proxy's NodePort rules
match every local address). Both nodes use the same pod CIDR (10.245.0.0/24), so pod traffic
leaving by a link is masqueraded to the node's link address (a reply to a pod address would stay
on the other node's own bridge); one such rule per link end, in the node's namespace.

Nothing is routed or NATed on the host, and neither namespace has a default route: a packet can go
from one node to the other and nowhere else. Deleting either namespace (`down`) deletes the veth
pair; `down` also removes the peer's rule and forgets the link in both state directories
(`links.json`). `link` again is a no-op; `unlink` removes it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from devutil import DevclusterError, log

LINK_NET = "10.202"
POD_CIDR = "10.245.0.0/24"  # tools/realnode.py
LINKS_FILE = "links.json"


def link_address(index: int) -> str:
    """Where the other clusters' nodes reach the real node of slot `index`."""
    return f"{LINK_NET}.{index}.1"


def _ip(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", "-n", netns, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise DevclusterError(f"ip -n {netns} {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _nat(netns: str, op: str, iface: str) -> int:
    rule = ["-t", "nat", op, "POSTROUTING", "-s", POD_CIDR, "-o", iface, "-j", "MASQUERADE"]
    return subprocess.run(["ip", "netns", "exec", netns, "iptables", "-w", *rule], capture_output=True,
                          check=False).returncode


def _node(state_dir: Path) -> dict[str, Any]:
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        raise DevclusterError(f"no running cluster at {state_dir}") from None
    nodes = state.get("real_nodes") or []
    if not nodes:
        raise DevclusterError(f"the cluster at {state_dir} has no real node (up --real-nodes 1)")
    return dict(nodes[0])


def _records(state_dir: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads((state_dir / LINKS_FILE).read_text()))
    except (OSError, ValueError):
        return []


def _save(state_dir: Path, records: list[dict[str, Any]]) -> None:
    path = state_dir / LINKS_FILE
    if records:
        path.write_text(json.dumps(records, indent=2) + "\n")
    else:
        path.unlink(missing_ok=True)


def _end(node: dict[str, Any], peer: dict[str, Any]) -> tuple[str, str]:
    """(namespace, interface) of `node`'s end of its link to `peer`."""
    return node["netns"], f"fsl-{int(peer['netns'].rsplit('-', 1)[1])}"


def _index(node: dict[str, Any]) -> int:
    return int(node["netns"].rsplit("-", 1)[1])


def link(state_dir: Path, peer_dir: Path) -> dict[str, str]:
    """Link the real nodes of two running clusters; returns each side's link address."""
    a, b = _node(state_dir), _node(peer_dir)
    if a["netns"] == b["netns"]:
        raise DevclusterError("a cluster cannot be linked to itself")
    (ns_a, if_a), (ns_b, if_b) = _end(a, b), _end(b, a)
    if _ip(ns_a, "link", "show", if_a, check=False).returncode != 0:
        subprocess.run(["ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns",
                        ns_b], capture_output=True, text=True, check=True)
    for (ns, iface, me, other) in ((ns_a, if_a, a, b), (ns_b, if_b, b, a)):
        mine, theirs = link_address(_index(me)), link_address(_index(other))
        if mine not in _ip(ns, "-4", "addr", "show", "dev", iface).stdout:
            _ip(ns, "addr", "add", f"{mine}/32", "dev", iface)
        _ip(ns, "link", "set", iface, "up")
        _ip(ns, "route", "replace", f"{theirs}/32", "dev", iface, "src", mine)
        if _nat(ns, "-C", iface) != 0 and _nat(ns, "-A", iface) != 0:
            raise DevclusterError(f"iptables in {ns}: cannot add the masquerade rule for {iface}")
    for here, there, peer_ns in ((state_dir, peer_dir, ns_b), (peer_dir, state_dir, ns_a)):
        records = [r for r in _records(here) if r["peer_netns"] != peer_ns]
        _save(here, [*records, {"peer_dir": str(there), "peer_netns": peer_ns}])
    addresses = {str(state_dir): link_address(_index(a)), str(peer_dir): link_address(_index(b))}
    log(f"linked {ns_a} ({addresses[str(state_dir)]}) <-> {ns_b} ({addresses[str(peer_dir)]})")
    return addresses


def unlink_all(state_dir: Path, netns: str) -> list[str]:
    """Remove every link of the node in `netns` (the cluster at `state_dir` is going down): the
    veth pair, the masquerade rule on both ends, the records in both state directories. Returns
    what could not be removed."""
    problems = []
    for record in _records(state_dir):
        peer_ns = record["peer_netns"]
        here = f"fsl-{int(peer_ns.rsplit('-', 1)[1])}"
        there = f"fsl-{int(netns.rsplit('-', 1)[1])}"
        while _nat(netns, "-D", here) == 0:
            pass
        while _nat(peer_ns, "-D", there) == 0:
            pass
        _ip(netns, "link", "del", here, check=False)  # its peer goes with it
        if _ip(peer_ns, "link", "show", there, check=False).returncode == 0 \
                and _ip(peer_ns, "link", "del", there, check=False).returncode != 0:
            problems.append(f"link {there} in {peer_ns}")
        peer_dir = Path(record["peer_dir"])
        _save(peer_dir, [r for r in _records(peer_dir) if r["peer_netns"] != netns])
    _save(state_dir, [])
    return problems
