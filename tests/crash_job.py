"""The process tests/end_to_end/test_crash.py kills: the host-to-host traffic report
(packets cut per minute, joined twice with a PostgreSQL hosts table), a per-minute packet
count and each sender's moving average of bytes per minute (a table function whose state
holds all history), all into one PostgreSQL sink, over a generated packet stream, with a
checkpoint directory.

``python tests/crash_job.py CHECKPOINT_DIR POSTGRES_URL TABLE_PREFIX``: runs (or, with a
checkpoint, resumes) until the stream's last packet is committed, then prints ``done``.
Every line the sink logs when it starts writing a cycle is printed (``sink: ...``), so
the test can kill the process in the middle of a commit.
"""

from __future__ import annotations

import logging
import sys

from sparkcq import Engine

PACKETS = 18_000  # t = 0 .. 17,999 s: 300 one-minute chunks, 15 cycles
PER_CYCLE = 1_200


def main(folder: str, url: str, prefix: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("sink: %(message)s"))
    sink_log = logging.getLogger("sparkcq.postgres")
    sink_log.setLevel(logging.DEBUG)
    sink_log.addHandler(handler)
    eng = Engine(master="local[2]", shuffle_partitions=2, trusted=True,
                 checkpoint_dir=folder, checkpoint_every=2)
    if not eng.catalog.streams:
        eng.execute(f"""
        CREATE STREAM packet_stream (pid BIGINT, t BIGINT, from_ip STRING, to_ip STRING,
                                     bytes BIGINT)
          WITH (event_time='t', time_unit='seconds', source='generator', pace='fast',
                batch='{PER_CYCLE}', limit='{PACKETS}',
                expr_pid='id', expr_bytes='40 + id % 1461',
                expr_from_ip='concat("10.0.0.", cast(id % 7 as string))',
                expr_to_ip='concat("10.0.0.", cast((id * 3) % 5 as string))');
        CREATE TABLE Hosts (ip STRING, host_id STRING)
          WITH (format='postgres', url='{url}', table='{prefix}hosts');
        CREATE QUERY traffic INTO postgres WITH (url='{url}', table='{prefix}traffic') AS
        SELECT floor(S.t/60) AS minute, h1.host_id AS from_host, h2.host_id AS to_host,
               SUM(S.bytes) AS bytes
        FROM STREAM(packet_stream, 'CUT ON t BY 60 SECS') S, Hosts h1, Hosts h2
        WHERE h1.ip = S.from_ip AND h2.ip = S.to_ip
        GROUP BY minute, from_host, to_host;
        CREATE QUERY packets INTO postgres WITH (url='{url}', table='{prefix}packets') AS
        SELECT floor(t/60) AS minute, count(*) AS n FROM packet_stream [CUT ON t BY 60 SECS]
        GROUP BY minute;
        CREATE FUNCTION ema(of STRING, alpha DOUBLE)
          RETURNS TABLE (average DOUBLE, samples BIGINT)
          USING 'sparkcq.table_functions.library:ExponentialAverage';
        CREATE QUERY smooth INTO postgres WITH (url='{url}', table='{prefix}smooth') AS
        SELECT from_ip, average, samples
        FROM ema(TABLE packet_stream [CUT ON t BY 60 SECS] PARTITION BY from_ip, 'bytes', 0.25);
        """)
    print(f"started at cycle {eng.cycle}", flush=True)
    eng.run_until_idle()
    print("done", flush=True)
    eng.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
