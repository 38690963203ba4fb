"""A producer process for the feed tests: it holds ``sparkcq.client.Feed`` connections and
does what each line of its stdin says, answering each with one JSON line on stdout.

    {"stream": "a", "do": "header", "columns": "k BIGINT, t BIGINT", "event_time": "t"}
    {"stream": "a", "do": "send", "rows": [{"k": 1, "t": 2}]}
    {"stream": "a", "do": "send_arrow", "rows": [...]}      (one Arrow INSERTION)
    {"stream": "a", "do": "boundary", "time": 100}
    {"stream": "a", "do": "stop"} | {"stream": "a", "do": "remove"} | {"stream": "a", "do": "sync"}

Usage: feed_client.py HOST PORT
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa

from sparkcq.client import Feed


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    feeds: dict[str, Feed] = {}
    for line in sys.stdin:
        order = json.loads(line)
        stream = order["stream"]
        if stream not in feeds:
            feeds[stream] = Feed(stream, host, port, producer=f"test-{stream}").connect()
        feed = feeds[stream]
        answer: Any = None
        try:
            match order["do"]:
                case "header":
                    answer = feed.header(order["columns"], order["event_time"],
                                         **order.get("options", {}))
                case "send":
                    feed.send(order["rows"])
                    answer = vars(feed.sync())
                case "send_arrow":
                    feed.send_table(pa.Table.from_pylist(order["rows"]))
                    answer = vars(feed.sync())
                case "boundary":
                    feed.boundary(order["time"])
                    answer = vars(feed.sync())
                case "stop":
                    answer = feed.stop()
                case "remove":
                    answer = feed.remove()
                case "sync":
                    answer = vars(feed.sync())
        except Exception as e:  # noqa: BLE001 - the test reads the error
            answer = {"error": str(e), "kind": type(e).__name__}
        print(json.dumps(answer, default=str), flush=True)
    for feed in feeds.values():
        feed.close()


if __name__ == "__main__":
    main()
