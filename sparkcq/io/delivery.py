"""The engine's sinks by name, which query writes to which, and the delivery of a cycle's
records to them (the contract of each sink: ``sparkcq.io.sinks``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from sparkcq.io.sinks import QueryOutput, Sink


@dataclass(frozen=True)
class Destination:
    """Where one query's records go: the sink's name, and what the sink knows of it."""

    sink: str
    output: QueryOutput


class Sinks(Mapping[str, Sink]):
    """Sinks by lower-case name, and each query's destination."""

    def __init__(self, sinks: Mapping[str, Sink]):
        self.sinks: dict[str, Sink] = {k.lower(): v for k, v in sinks.items()}
        self.destinations: dict[str, Destination] = {}  # by lower-case query name

    def __getitem__(self, key: str) -> Sink:
        return self.sinks[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.sinks)

    def __len__(self) -> int:
        return len(self.sinks)

    def register(self, name: str, sink: Sink) -> None:
        """Make ``sink`` available to queries as ``INTO name``."""
        self.sinks[name.lower()] = sink

    def route(self, sink: str, output: QueryOutput) -> None:
        """Send the records of query ``output.name`` to ``sink`` from now on."""
        self.destinations[output.name.lower()] = Destination(sink, output)

    def destination(self, query: str) -> Destination:
        """Where query ``query`` writes (KeyError: it writes nowhere)."""
        return self.destinations[query.lower()]

    def forget(self, query: str) -> None:
        """Query ``query`` is dropped: its sink forgets it."""
        found = self.destinations.pop(query.lower(), None)
        if found is not None:
            self.sinks[found.sink].forget(found.output.name)

    def deliver(self, cycle: int, tables: Mapping[str, pa.Table]) -> None:
        """Hand each sink the cycle's records of all its queries at once, replayable sinks
        first (``sparkcq.io.sinks``): if one fails, the cycle is rolled back and done again.
        """
        per_sink: dict[str, dict[str, tuple[QueryOutput, pd.DataFrame]]] = {}
        for name, table in tables.items():
            found = self.destinations.get(name.lower())
            if found is not None and table.num_rows:
                per_sink.setdefault(found.sink, {})[found.output.name] = (
                    found.output, table.to_pandas())
        for sink_name in sorted(per_sink, key=lambda n: not self.sinks[n].replayable):
            self.sinks[sink_name].write(cycle, per_sink[sink_name])

    def resume(self, engine_id: str) -> None:
        """A restored engine commits as ``engine_id`` (transactional sinks skip its cycles
        they hold already).
        """
        for sink in self.sinks.values():
            sink.resume(engine_id)

    def close(self) -> None:
        """Close every sink."""
        for sink in self.sinks.values():
            sink.close()
