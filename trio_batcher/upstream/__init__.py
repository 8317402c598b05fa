"""The upstream: Anthropic's Messages API and everything between us and it.

``client`` sends calls and turns every failure into a ``ProxyError``; ``pool`` keeps the
keep-alive connections; ``sse`` decodes event streams; ``errors`` reads upstream error
answers; ``resilience`` retries, cools down and adapts the concurrency cap.
"""
