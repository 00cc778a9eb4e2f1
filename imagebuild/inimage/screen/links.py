"""links: the node's high-speed network ports are up.

HPE Slingshot NICs show as network interfaces hsn0, hsn1, ... (their state in
/sys/class/net/hsn*/operstate); InfiniBand and RoCE ports as
/sys/class/infiniband/<device>/ports/<n>/{state,phys_state} ("4: ACTIVE", "5: LinkUp").
Ports an administrator disabled (phys_state Disabled or Sleep) are left out, as AMD
Primus's node_smoke leaves them out; a node with fewer ports up than --expect-links, or
any included port down, fails: training over the remaining NICs runs slower or falls
back to sockets.
"""

from __future__ import annotations

from ..doctor.finding import Finding, failed, passed, skipped
from ..doctor.node import Node

ITEM = "links"
_IDLE_PHYS = ("disabled", "sleep")


def ports(node: Node) -> tuple[list[tuple[str, bool]], list[str]]:
    """([(port, up)], [ports left out])."""
    found: list[tuple[str, bool]] = []
    left_out: list[str] = []
    net = node.path("/sys/class/net")
    for interface in sorted(net.glob("hsn*")) if net.is_dir() else []:
        state = (node.read(f"/sys/class/net/{interface.name}/operstate") or "").strip()
        found.append((interface.name, state == "up"))
    ib = node.path("/sys/class/infiniband")
    for device in sorted(ib.iterdir()) if ib.is_dir() else []:
        for port in sorted((device / "ports").glob("*")):
            name = f"{device.name}:{port.name}"
            state = (node.read(f"/sys/class/infiniband/{device.name}/ports/{port.name}/state")
                     or "").strip()
            phys = (node.read(f"/sys/class/infiniband/{device.name}/ports/{port.name}/"
                              "phys_state") or "").strip()
            if phys.split(":")[-1].strip().lower() in _IDLE_PHYS:
                left_out.append(f"{name} ({phys})")
                continue
            found.append((name, state.endswith("ACTIVE") and phys.endswith("LinkUp")))
    return found, left_out


def check(node: Node, expect: int | None = None) -> Finding:
    found, left_out = ports(node)
    if not found and not expect:
        return skipped(ITEM, "no Slingshot (hsn*) or InfiniBand port on this node"
                       + (f"; left out: {', '.join(left_out)}" if left_out else ""))
    down = [name for name, up in found if not up]
    up = [name for name, ok in found if ok]
    if down:
        return failed(ITEM, f"{len(down)} of {len(found)} port(s) down: {', '.join(down)}",
                      "drain the node and have its links checked")
    if expect and len(up) < expect:
        return failed(ITEM, f"{len(up)} port(s) up, {expect} expected (--expect-links): "
                      f"{', '.join(up) or 'none'}", "drain the node and have its NICs checked")
    return passed(ITEM, f"{len(up)} port(s) up: {', '.join(up)}"
                  + (f"; left out: {', '.join(left_out)}" if left_out else ""))
