"""Many upstreams: which deployments serve Claude, and which one a call goes to.

``config`` reads ``UPSTREAMS_FILE`` (or settings) into frozen ``UpstreamSpec``s; ``build``
makes a ``steward`` of each (its client, cap, resilience and health); ``routing`` is the
pure router: given the model, a conversation key and each upstream's state, the ordered
list of upstreams to try; ``affinity`` remembers which upstream served a conversation
(bounded, LRU with a TTL); ``conversation`` derives a conversation's key and ``facts``
what else a door works out of a body for the router; ``fleet`` puts them together: the
pipeline hands it each call, and it routes, attempts, fails over and holds the slot
(docs/upstreams.md).
"""

from __future__ import annotations
