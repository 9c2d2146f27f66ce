"""The transfer engine: a job's items kept in flight by the transfer modules' workers, its
setting changed while the data flows, the flow measured (`engine`, `items`, `flow`)."""

from stork.engine.engine import Engine, Taken
from stork.engine.flow import Flow, Stretch, Window, series_flow
from stork.engine.items import Assembly, piece_bytes, plan_items, range_bytes, split

__all__ = ["Assembly", "Engine", "Flow", "Stretch", "Taken", "Window", "piece_bytes",
           "plan_items", "range_bytes", "series_flow", "split"]
