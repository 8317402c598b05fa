"""One request's way through the gateway: admit, dispatch, relay."""
