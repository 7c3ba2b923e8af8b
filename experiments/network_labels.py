"""What a data file's `network` label says: the catalog link it names, and whether it runs through TCP.

Labels are free text as benchmark files write them ("10gbe-tcp", "100Gb
IPoIB", "IB EDR", "ib100", "100GbE RoCE"); `link_of_network` maps one to
the catalog (`sweep.scenario.catalog.LINKS`), `says_tcp` tells whether the
fabric ran through the kernel's socket stack.
"""
from __future__ import annotations

import re

from sweep.scenario import catalog

# Words that name a transport, not a wire (`says_tcp` reads TCP from two of them).
TRANSPORT_WORDS = {"tcp", "ipoib", "rdma", "roce", "ip", "sockets", "verbs"}
IB_GENERATIONS = {"fdr": "ib-fdr", "edr": "ib-edr", "hdr": "ib-hdr", "ndr": "ib-ndr"}
IB_BY_SPEED = {56: "ib-fdr", 100: "ib-edr", 200: "ib-hdr", 400: "ib-ndr"}
ETHERNET_BY_SPEED = {10: "10gbe", 25: "25gbe", 100: "100gbe", 200: "200gbe", 400: "400gbe"}


def link_of_network(network: str) -> str | None:
    """The catalog link a `network` label names, else None: a catalog name
    once transport words are dropped ("10gbe-tcp" -> 10gbe, "100gbe rdma"
    -> 100gbe, "IB EDR" -> ib-edr), else InfiniBand by generation or speed
    ("100Gb InfiniBand", "100gbib" -> ib-edr), else Ethernet by speed
    ("100GbE RoCE" -> 100gbe)."""
    label = network.lower()
    words = [w for w in label_words(network) if w not in TRANSPORT_WORDS]
    name = "-".join(words)
    if name in catalog.LINKS and not name.startswith(("pcie", "nvlink")):
        return name
    speed = label_speed(network)
    generation = next((IB_GENERATIONS[w] for w in words if w in IB_GENERATIONS), None)
    infiniband = (generation or "infiniband" in label or "ipoib" in label or "ib" in label_tokens(network)
                  or re.search(r"\d+\s*g(b|bit)?ib\b", label))
    if infiniband:
        return generation or IB_BY_SPEED.get(speed)
    return ETHERNET_BY_SPEED.get(speed)


def label_tokens(network: str) -> list[str]:
    """A `network` label's runs of digits and of letters ("ib100-tcp" -> ib, 100, tcp)."""
    return re.findall(r"\d+|[a-z]+", network.lower())


def label_speed(network: str) -> int | None:
    """The link speed in Gb/s a `network` label states: a number before a
    unit that starts with g ("100Gb", "2x100gbps" -> 100), else a number
    that stands alone or before a transport word ("ib100", "ib-100-tcp" ->
    100), else None."""
    tokens = label_tokens(network)
    numbers = [(int(t), tokens[i + 1] if i + 1 < len(tokens) else "") for i, t in enumerate(tokens) if t.isdigit()]
    for value, after in numbers:
        if after.startswith("g"):
            return value
    return next((value for value, after in numbers if after in ("", "ib", *TRANSPORT_WORDS)), None)


def label_words(network: str) -> list[str]:
    """A `network` label's words, lower case ("100Gb IPoIB" -> 100gb, ipoib)."""
    return [w for w in re.split(r"[^a-z0-9]+", network.lower()) if w]


def says_tcp(network: str) -> bool:
    """Whether a `network` label names a TCP transport ("10gbe-tcp", "100Gb IPoIB")."""
    return bool({"tcp", "ipoib"} & set(label_words(network)))
