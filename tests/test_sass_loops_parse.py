"""The SASS loop finder and the role attribution on small inputs (no nvcc)."""
import pytest

from conftest import ROOT
from b200c.errors import BuildError
from b200c.sass.roles import kernel_layout, role_loops
from b200c.sass.loops import find_loops, is_spin_wait, loops_by_mix, mix, opcode_stream, parse_listing

# a role dispatch through BRX, a K/V loop whose header is an mbarrier wait with
# its retry block out of line (the retry jumps back into the loop: not a loop
# itself), and a dead self-branch after EXIT
LISTING = """
	.section	.text.k,"ax",@progbits
k:
.text.k:
	//## File "/t/k.cu", line 90
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   BRX R0 -0x20 ;
.L_x_0:
	//## File "/t/k.cu", line 7 inlined at "/t/k.cu", line 20
	//## File "/t/k.cu", line 20 inlined at "/t/k.cu", line 91
	//## File "/t/k.cu", line 91
        /*0020*/                   MOV R1, RZ ;
.L_x_1:
        /*0030*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2], R3 ;
        /*0040*/              @!P0 BRA `(.L_x_5) ;
.L_x_2:
	//## File "/t/k.cu", line 22 inlined at "/t/k.cu", line 91
	//## File "/t/k.cu", line 91
        /*0050*/                   MUFU.EX2 R4, R4 ;
        /*0060*/                   FMNMX3 R5, R5, R6, R7 ;
        /*0070*/                   FMNMX R5, R5, R6 ;
        /*0080*/                   FADD.FTZ R5, R5, R6 ;
        /*0090*/                   FADD2 R6, R6.F32x2.HI_LO, R8.F32x2.HI_LO ;
        /*00a0*/                   BRA.U UP0, `(.L_x_1) ;
        /*00b0*/                   EXIT ;
.L_x_5:
	//## File "/t/k.cu", line 7 inlined at "/t/k.cu", line 21
	//## File "/t/k.cu", line 21 inlined at "/t/k.cu", line 91
	//## File "/t/k.cu", line 91
        /*00c0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2], R3 ;
        /*00d0*/              @!P0 BRA `(.L_x_5) ;
        /*00e0*/                   BRA `(.L_x_2) ;
.L_x_6:
        /*00f0*/                   BRA `(.L_x_6) ;
"""


def test_natural_loops_and_spin_waits():
    (fn,) = parse_listing(LISTING)
    assert len(fn.instrs) == 16 and fn.instrs[3].frames[-1] == ("/t/k.cu", 91)
    loops = find_loops(fn)
    assert [(fn.instrs[l.header].addr, l.latch.addr, len(l.body), l.out_of_line) for l in loops] == [
        (0x30, 0xA0, 8, 3), (0xC0, 0xD0, 2, 0)]
    assert [is_spin_wait(l) for l in loops] == [False, True]
    assert loops[0].contains(loops[1]) is False


def test_mix_columns():
    (fn,) = parse_listing(LISTING)
    m = mix(find_loops(fn)[0].body)
    assert m["static"] == 8 and m["MUFU.EX2"] == 1 and m["FMNMX3"] == 1 and m["FMNMX"] == 1
    assert m["FADD"] == 1 and m["FADD2"] == 1 and m["SYNCS"] == 1 and m["predicated"] == 1
    assert m["FFMA"] == m["UTC*MMA"] == m["UTMALDG"] == 0
    assert loops_by_mix([fn])["softmax"].steady[0].latch.addr == 0xA0


def test_opcode_stream_ignores_line_info():
    plain = "\n".join(l for l in LISTING.splitlines() if "//##" not in l)
    assert opcode_stream(plain) == opcode_stream(LISTING)
    assert opcode_stream(LISTING)[2] == ("", "MOV", "R1, RZ")


def test_layout_of_a_generated_kernel():
    src = (ROOT / "tests/golden/18_tma_l2_promotion.cu").read_text()
    lay = kernel_layout(src)
    assert [k.role for k in lay.kv_loops] == ["softmax", "correction", "load", "mma"]
    lines = src.splitlines()
    assert all("#pragma unroll 1" in lines[k.first - 2] and lines[k.last - 1].strip() == "}" for k in lay.kv_loops)
    assert list(lay.calls.values()) == ["softmax", "correction", "load", "mma", "spare"]
    # the softmax's masked-tile loop is not a steady-state loop
    assert sum(k.role == "softmax" for k in lay.kv_loops) == 1
    # stages 4-6 comment their MMA loop "K/V tiles: <issue order>"
    lay5 = kernel_layout((ROOT / "tests/golden/05_two_q_tiles.cu").read_text())
    assert [k.role for k in lay5.kv_loops] == ["softmax", "load", "mma"]


def test_bad_inputs_raise_build_errors():
    with pytest.raises(BuildError, match="not a b200c kernel"):
        kernel_layout("__global__ void k() {}\n")
    src = (ROOT / "tests/golden/18_tma_l2_promotion.cu").read_text()
    plain = "\n".join(l for l in LISTING.splitlines() if "//##" not in l)
    with pytest.raises(BuildError, match="no line info"):
        role_loops(src, plain)
    with pytest.raises(BuildError, match="no SASS instructions"):
        parse_listing("nvdisasm printed nothing useful\n")


def test_missing_disassembler_is_a_build_error(monkeypatch, tmp_path):
    import b200c.sass.disasm as sass
    from b200c.sass.loops import disassemble_lines

    monkeypatch.setattr(sass, "_tool_dirs", lambda: [])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match="nvdisasm not found"):
        disassemble_lines(tmp_path / "k.cubin")


def test_hot_loop_stays_in_its_kernel():
    """A module's kernels each start at address 0: the loop of the second kernel is found, and an EXIT of the
    first one at an address inside that loop's range is not part of it (the backward module's preprocess,
    main and postprocess kernels)."""
    from b200c.sass.hopper import hot_loop

    first = ("        Function : pre\n"
             "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
             "        /*0010*/                   IADD3 R2, R1, 0x1, RZ ;\n"
             "        /*0020*/                   EXIT ;\n"
             "        /*0030*/                   BRA 0x30;\n")
    second = ("        Function : main\n"
              "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
              "        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;\n"
              "        /*0020*/                   MUFU.EX2 R3, R3 ;\n"
              "        /*0030*/                   FFMA R4, R3, R3, R4 ;\n"
              "        /*0040*/              @P0   BRA 0x10 ;\n"
              "        /*0050*/                   EXIT ;\n")
    loop = hot_loop(first + second)
    assert loop is not None and loop["instructions"] == 4 and loop["mma"] == 1 and loop["mufu_ex2"] == 1
    assert loop["body"][0].startswith("HGMMA") and loop["body"][-1].startswith("@P0")
