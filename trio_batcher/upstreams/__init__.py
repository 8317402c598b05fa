"""Many upstreams, as data: which deployments serve Claude, and which one a call goes to.

``config`` reads ``UPSTREAMS_FILE`` (or settings) into frozen ``UpstreamSpec``s; ``routing``
is the pure router: given the model, a conversation key and each upstream's state, the
ordered list of upstreams to try; ``affinity`` remembers which upstream served a
conversation (bounded, LRU with a TTL); ``conversation`` derives a conversation's key.

Nothing here is wired into the runtime yet: the pipeline will ask the router for its
upstreams in a later step (docs/upstreams.md).
"""

from __future__ import annotations
