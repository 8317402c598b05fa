"""The observatory: what the proxy counts about itself (``metrics``, broken down per model,
front door and tenant in ``models``, ``surfaces`` and ``tenants``), what that costs
(``pricing``), and its Prometheus exposition (``prometheus``)."""
