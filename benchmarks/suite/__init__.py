"""The benchmark suite: sparkcq against Spark Structured Streaming and Flink SQL on the same
CSV input, one engine after another in one invocation (see ``__main__.py``).
"""
