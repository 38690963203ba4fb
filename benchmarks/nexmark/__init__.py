"""NEXMark (persons, auctions, bids) for the benchmark suite: a generator that runs inside
Spark, queries 0, 1, 2, 5, 7 and 8 in sparkcq SQL and in Spark Structured Streaming, and a
runner that checks both against results computed independently with pandas.
"""
