"""Capacity planning: how a served model behaves under load (``simulator``: a discrete-event model of
a dynamic-batching inference server, fed by predicted latency per batch size)."""
