"""``b200c bench``: TFLOPS of b200c schedules on the present GPU next to the
torch SDPA backends (cuDNN, FlashAttention-2, memory-efficient) and, on a
B200 with flash-attn-4 installed, FlashAttention-4, all measured in one run;
CSV/JSON/Markdown tables, a bar chart, and (``--profile``) Chrome/Perfetto
timelines of each warp role.

Modules: ``shapes`` (problem sizes, FLOPs), ``timing`` (CUDA events, L2
flush, median), ``baselines`` (SDPA/FA4 callables), ``device`` (the GPU, or a
typed refusal), ``run`` (the measurement loop), ``report`` (outputs),
``trace`` (profiling builds -> trace JSON), ``cli`` (the subcommand).
Sits above the runtime: imports b200c.runtime, is imported by b200c.cli only.
"""
