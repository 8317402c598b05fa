"""The HTTP edge: what a client's request meets first.

Framing and body checks, client keys, web origins, the model list, and one door per client
dialect, each of which decodes its body into an upstream request for the pipeline and
encodes the pipeline's answer back in the client's own shape.
"""
