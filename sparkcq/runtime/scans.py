"""The scans of the source streams: one per stream, and for a feed stream whose HEADER
changed its schema, the scans of its earlier schemas that running queries still read.

A query compiled against an earlier schema keeps its scan (and so its state); each cycle
that scan takes the stream's new rows projected onto its columns (``batches``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from sparkcq.plan.nodes import StreamScan
from sparkcq.runtime.cycle_input import SourceBatch, project_batch
from sparkcq.runtime.frames import Runtime
from sparkcq.runtime.operators.scan import ScanOperator


class StreamScans(Mapping[str, ScanOperator]):
    """Each source stream's current scan, by lower-case stream name."""

    def __init__(self, rt: Runtime, max_dead_letters: int):
        self.rt = rt
        self.max_dead_letters = max_dead_letters
        self.current: dict[str, ScanOperator] = {}
        self.earlier: dict[str, list[ScanOperator]] = {}

    def __getitem__(self, key: str) -> ScanOperator:
        return self.current[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.current)

    def __len__(self) -> int:
        return len(self.current)

    def add(self, node: StreamScan, lateness: int) -> ScanOperator:
        """A new stream's scan."""
        scan = ScanOperator(node, self.rt, lateness, self.max_dead_letters)
        self.current[node.name.lower()] = scan
        return scan

    def replace(self, node: StreamScan, lateness: int,
                still_read: Callable[[StreamScan], bool]) -> ScanOperator:
        """The scan of a stream's new schema; the old one stays while queries read it
        (``still_read`` of its node), else it is freed.
        """
        key = node.name.lower()
        old = self.current.pop(key, None)
        if old is not None:
            if still_read(old.scan):
                self.earlier.setdefault(key, []).append(old)
            else:
                old.release()
        return self.add(node, lateness)

    def remove(self, stream: str) -> None:
        """Free every scan of ``stream`` (it leaves the catalog)."""
        key = stream.lower()
        scans = [self.current.pop(key)] if key in self.current else []
        for scan in [*scans, *self.earlier.pop(key, [])]:
            scan.release()

    def unused(self, scan: ScanOperator) -> None:
        """No query reads ``scan`` any more: an earlier schema's scan is freed (a stream's
        current one stays, for the queries to come).
        """
        earlier = self.earlier.get(scan.scan.name.lower(), [])
        if scan in earlier:
            earlier.remove(scan)
            scan.release()

    def operator_for(self, node: StreamScan) -> ScanOperator:
        """The scan that reads ``node``: the stream's current one or an earlier schema's."""
        key = node.name.lower()
        return next((s for s in self.earlier.get(key, []) if s.node == node), self.current[key])

    def batches(self, stream: str, batch: SourceBatch) -> dict[StreamScan, SourceBatch]:
        """A stream's batch for its scan, and projected for the scans of its earlier
        schemas.
        """
        key = stream.lower()
        out = {self.current[key].scan: batch}
        for old in self.earlier.get(key, []):
            out[old.scan] = project_batch(batch, old.scan.schema)
        return out

    def every(self) -> list[ScanOperator]:
        """Every scan, current and earlier."""
        return [*self.current.values(), *(s for ss in self.earlier.values() for s in ss)]
