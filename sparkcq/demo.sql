-- The sparkcq demo: road sensors and network packets, generated inside Spark.
CREATE STREAM sensors (sector STRING, speed DOUBLE, t TIMESTAMP)
  WITH (event_time='t', source='generator', rate='{rate}', keys='12',
        expr_speed='40 + 90 * rnd + 8 * sin(id / 38000.0)');  -- traffic speeds up and slows

CREATE STREAM router1 (pid BIGINT, from_ip STRING, to_ip STRING, bytes BIGINT, t TIMESTAMP)
  WITH (event_time='t', source='generator', rate='{rate}', keys='8', skew='1.0',
        expr_pid='id', expr_from_ip='concat("ip_", pmod(id, 8))',
        expr_to_ip='concat("ip_", pmod(id * 7 + 3, 8))', expr_bytes='64 + 1400 * rnd');

CREATE STREAM router2 (pid BIGINT, bytes BIGINT, t TIMESTAMP)
  WITH (event_time='t', source='generator', rate='{rate}', lateness='2 SECONDS',
        expr_pid='id', expr_bytes='64',
        expr_t='timestamp_micros(1767225600000000 + id * (1000000 div {rate}) + 500000 + cast(1000000 * rnd as bigint))');

-- 1. windowed aggregate: average and mid-range speed per sector over the last minute
CREATE QUERY sector_speed INTO console AS
  SELECT sector, avg(speed) AS avg_speed, (min(speed) + max(speed)) / 2 AS mid_range
  FROM sensors [RANGE 60 SECONDS SLIDE 10 SECONDS] GROUP BY sector;

-- 2. derived stream + filter: sectors whose 30-second average exceeds the limit
CREATE STREAM sector_avg AS ISTREAM
  SELECT sector, avg(speed) AS avg_speed FROM sensors [RANGE 30 SECONDS SLIDE 10 SECONDS]
  GROUP BY sector;
CREATE QUERY speeding INTO console AS
  SELECT sector, avg_speed FROM sector_avg WHERE avg_speed > 86;

-- 3. chunked report every 10 seconds: host-to-host traffic volume, joined with a table
CREATE QUERY traffic INTO console AS RSTREAM
  SELECT h.host AS host, p.to_ip AS to_ip, sum(p.bytes) AS bytes, count(*) AS packets
  FROM router1 [CUT ON t BY 10 SECONDS] AS p JOIN hosts AS h ON p.from_ip = h.ip
  GROUP BY h.host, p.to_ip;

-- 4. filter on a raw stream: jumbo packets
CREATE QUERY jumbo INTO console AS
  SELECT pid, from_ip, to_ip, bytes FROM router1 WHERE bytes > 1460;

-- 5. window join: the same packet seen at two routers, transit delay in milliseconds
CREATE QUERY transit INTO console AS ISTREAM
  SELECT a.pid AS pid, (unix_micros(b.t) - unix_micros(a.t)) / 1000 AS delay_ms
  FROM router1 [RANGE 3 SECONDS] AS a JOIN router2 [NOW] AS b ON a.pid = b.pid
  WHERE unix_micros(b.t) - unix_micros(a.t) > 1400000;
