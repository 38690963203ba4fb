"""Lookup joins, ``JOIN users FOR SYSTEM_TIME AS OF c.t``: each event meets the table's rows
as of its event time, once, and the table may be filled or replaced under the join (each
version serves the events from the instant the join switched to it).
"""

from __future__ import annotations

import pandas as pd


def rows(engine, query: str) -> list[tuple]:
    out = engine.results(query)
    return sorted(tuple(None if pd.isna(x) else x for x in r)
                  for r in out[["page", "name", "_ts", "_te"]].itertuples(index=False,
                                                                           name=None))


def test_each_event_meets_the_rows_as_of_its_time_across_table_changes(engine):
    engine.execute("""
      CREATE STREAM clicks (uid BIGINT, page STRING, t BIGINT) WITH (event_time='t');
      CREATE TABLE users (id BIGINT, name STRING);
      INSERT INTO users VALUES (1, 'ann'), (2, 'bo');
      CREATE QUERY enriched AS SELECT c.page, u.name FROM clicks AS c
        LEFT JOIN users FOR SYSTEM_TIME AS OF c.t AS u ON c.uid = u.id;
      CREATE QUERY matched AS SELECT c.page, u.name FROM clicks AS c
        JOIN users FOR SYSTEM_TIME AS OF c.t AS u ON c.uid = u.id;
    """)
    engine.push("clicks", [{"uid": 1, "page": "home", "t": 1},
                           {"uid": 3, "page": "cart", "t": 2}], watermark=5)
    engine.run_until_idle()
    engine.execute("INSERT INTO users VALUES (3, 'cy')")  # a new version under the join
    engine.load_table("users", [{"id": 1, "name": "ANN"}, {"id": 3, "name": "cy"}])
    engine.push("clicks", [{"uid": 1, "page": "x", "t": 6}, {"uid": 3, "page": "y", "t": 7},
                           {"uid": 2, "page": "z", "t": 8}], watermark=9)
    engine.end_input("clicks")
    engine.run_until_idle()
    # one record per event, an instant; the events before the change keep what they met
    assert rows(engine, "enriched") == [("cart", None, 2, 2), ("home", "ann", 1, 1),
                                        ("x", "ANN", 6, 6), ("y", "cy", 7, 7),
                                        ("z", None, 8, 8)]
    assert rows(engine, "matched") == [("home", "ann", 1, 1), ("x", "ANN", 6, 6),
                                       ("y", "cy", 7, 7)]
