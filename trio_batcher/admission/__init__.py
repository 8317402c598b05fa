"""Admission: who may call the upstream, and when.

``gate`` bounds the requests inside the proxy (slots, a bounded queue, shedding);
``dispatch`` runs upstream calls on behalf of request handlers (tickets, the direct
dispatcher); ``windows`` collects requests into admission windows that flush on size or time.
"""
