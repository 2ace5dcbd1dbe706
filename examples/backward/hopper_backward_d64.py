"""The built-in sm_90a backward schedule at head dim 64: 64 query rows per visit, 128 keys per K/V tile,
two consumer warpgroups of 64 keys each, a two-stage Q / dO ring. Each warpgroup computes every column of
the visit's dQ over its own 64 keys (at head dim 64 a warpgroup's half of the columns is not a whole
128-byte swizzle atom), so the warpgroups meet at no barrier within a visit.

    b200c compile examples/backward/hopper_backward_d64.py --emit plan
    b200c check examples/backward/hopper_backward_d64.py
"""
import b200c

schedule = b200c.default_backward_schedule(64)
