"""The built-in sm_90a backward schedule at head dim 64: FlashAttention-3's 128 x 128 tiles, 128 query rows per
visit, 128 keys per K/V tile, two consumer warpgroups of 64 keys each, a two-stage Q / dO ring. Each warpgroup
computes dQ's rows [64 w, 64 w + 64) (its slice of the visit's dS^T tile) over every key, after both wrote
their dS^T rows; P^T is packed into BF16 pairs as dS^T is made (S and dP of 128 rows take 128 registers per
thread, too many to keep P^T's pairs beside them).

    b200c compile examples/backward/hopper_backward_d64.py --emit plan
    b200c check examples/backward/hopper_backward_d64.py
"""
import b200c

schedule = b200c.default_backward_schedule(64)
