"""The observatory: what the proxy counts about itself (``metrics``), what that costs
(``pricing``), and its Prometheus exposition (``prometheus``)."""
