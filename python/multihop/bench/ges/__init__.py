"""Measurements of the GES application: the paper's testbed live, its floor, and a NATS peer.

Moved out of :mod:`multihop.ges` (issue 25: testbeds and peer comparisons are the benchmarks'):
:mod:`.testbed` (brokers, subscribers and a publisher on a live runtime, routing paper section 4),
:mod:`.floor` (the same processes and channels with no GES in them: what an event costs before any
routing), :mod:`.nats_peer` (the same events through a NATS cluster on loopback).
"""
