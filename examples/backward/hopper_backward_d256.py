"""The built-in sm_90a backward schedule at head dim 256: 64 query rows per visit, 64 keys per K/V tile,
a two-stage Q / dO ring. dK and dV of 64 keys x 256 columns do not fit one warpgroup's registers, so the
two consumer warpgroups split them by columns (128 each): each computes S^T and dP^T of all 64 keys, stores
half of the dS^T rows, and computes its 128 columns of dQ after both met at a named barrier.

    b200c compile examples/backward/hopper_backward_d256.py --emit plan
    b200c check examples/backward/hopper_backward_d256.py
"""
import b200c

schedule = b200c.default_backward_schedule(256)
