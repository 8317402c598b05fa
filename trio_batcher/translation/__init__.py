"""Pure translation between client dialects and Anthropic Messages, one subpackage a dialect.

Nothing here does I/O or reads the clock: each dialect's rules are plain functions and
state machines, tested as data.
"""
