"""The live web console (``docs/console.md``): what the running system shows of itself, published
after each cycle by the engine thread and pushed to pages over server-sent events.
"""
