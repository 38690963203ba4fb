"""Table functions with state: user code that reads a stream chunk by chunk and keeps
buffers across chunks.

``user.py`` defines the protocol and what the catalog keeps, ``runner.py`` runs one
operator's instances inside Spark's Python workers, ``library.py`` holds the functions
sparkcq ships, written as a user would write theirs.
"""
