"""Admission: who may call the upstream, and when.

``gate`` bounds the requests inside the proxy (slots, a bounded queue, shedding, fair by
tenant); ``dispatch`` runs upstream calls on behalf of request handlers (the dispatcher and
its tickets); ``windows`` is the policy by which the dispatcher collects requests into
admission windows that flush on size or time; ``shared_slots`` is what the dispatcher asks of
slots shared with other instances.
"""
