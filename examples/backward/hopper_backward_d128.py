"""The built-in sm_90a backward schedule at head dim 128 (FlashAttention-3's tiles: 64 query rows per
visit, 128 keys per K/V tile, two consumer warpgroups of 64 keys each, a two-stage Q / dO ring).

    b200c compile examples/backward/hopper_backward_d128.py --emit plan
    b200c compile examples/backward/hopper_backward_d128.py -o backward.cu
"""
import b200c

schedule = b200c.default_backward_schedule(128)
