"""A stub third backend (a consumer-Blackwell ``sm120a`` target has no tcgen05 and no wgmma):
everything a backend provides, in its own folder, for tests/test_new_backend.py. Its kernels are
not attention kernels: the plan, the roles and the protocol are the Hopper backend's (the stub
only shows the plumbing), and its emit prints a kernel with the shared entry signature, the
shared work decomposition's device code and each role's program from the shared templates
through this backend's own renderer table, which nvcc builds for sm_120a."""
from pathlib import Path

from b200c.codegen.render import environment, indent, render_block
from b200c.codegen.signature import ATTENTION_PARAMS, KERNEL_NAME, c_parameter_list
from b200c.codegen.sm90 import P_ALIASES_S, RULES, lower, make_plan  # noqa: F401 (the stub's plan and roles)
from b200c.codegen.work import decomposition, template_args

TEXT = {"warp_arrive": "mbar_arrive_sm120(c.bar({bar}));  // one arrival per warp"}


def _shared(node) -> bool:
    """Whether a node and everything under it are shared IR nodes (the stub renders only those)."""
    return type(node).__module__ == "b200c.codegen.ir" and all(_shared(k) for k in node.children())


def emit(ir, launch) -> str:
    env = environment(str(Path(__file__).with_name("templates")), tuple(sorted(TEXT.items())))
    roles = [dict(name=r.name, body=indent(render_block(env, [n for n in r.body if _shared(n)]))) for r in ir.roles]
    return env.get_template("kernel.cu.j2").render(plan=ir.plan, roles=roles, work=template_args(
        decomposition(ir.plan)), entry=c_parameter_list(ATTENTION_PARAMS, f"{KERNEL_NAME}("))


__all__ = ["RULES", "P_ALIASES_S", "make_plan", "lower", "emit"]
