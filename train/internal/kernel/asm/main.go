// Command asm generates train/internal/kernel's AVX2+FMA assembly with avo
// (github.com/mmcloughlin/avo): the GEMM micro-kernels, the Adam update and
// the float64⇄float32 conversions. It is a module of its own so that avo is
// no dependency of trainflow; the generated kernel_amd64.s and
// stubs_amd64.go are committed, and building trainflow needs neither avo
// nor cgo. Run it through go generate in train/internal/kernel.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The micro-kernel tile is mr rows of C by two YMM vectors of columns:
// 6×16 in float32, 6×8 in float64. Twelve accumulators, two B vectors and
// one broadcast A value use 15 of the 16 YMM registers.
const mr = 6

// prec holds the instructions and sizes of one precision.
type prec struct {
	name     string // Go element type
	size     int    // bytes per element
	lanes    int    // elements per YMM vector
	bcast    func(ops ...Op)
	fma      func(ops ...Op)
	mul      func(ops ...Op)
	movu     func(ops ...Op)
	zero     func(ops ...Op)
	betaMove func(mr, r Op)
	betaTest func(ops ...Op) // shift out the sign bit, leaving ZF set iff ±0
}

var (
	f32 = prec{name: "float32", size: 4, lanes: 8, bcast: VBROADCASTSS, fma: VFMADD231PS, mul: VMULPS, movu: VMOVUPS,
		zero: VXORPS, betaMove: MOVL, betaTest: SHLL}
	f64 = prec{name: "float64", size: 8, lanes: 4, bcast: VBROADCASTSD, fma: VFMADD231PD, mul: VMULPD, movu: VMOVUPD,
		zero: VXORPD, betaMove: MOVQ, betaTest: SHLQ}
)

func main() {
	ConstraintExpr("!purego")
	gemmKernel("gemmAVX2F32", f32, packed, mr)
	gemmKernel("gemmAVX2F64", f64, packed, mr)
	gemmKernel("gemmRowsAVX2F32", f32, inRows, mr)
	gemmKernel("gemmRowsAVX2F64", f64, inRows, mr)
	gemmKernel("gemmColsAVX2F32", f32, inCols, mr)
	gemmKernel("gemmColsAVX2F64", f64, inCols, mr)
	// The last rows of an op(A) whose rows are not a multiple of six, in
	// float32 (the DNNs' precision): without them that panel is packed,
	// padded with zeros and computed as a whole tile.
	for rows := 1; rows < mr; rows++ {
		gemmKernel(fmt.Sprintf("gemmRowsAVX2F32x%d", rows), f32, inRows, rows)
		gemmKernel(fmt.Sprintf("gemmColsAVX2F32x%d", rows), f32, inCols, rows)
	}
	fmaPeak()
	adam()
	convert()
	add()
	Generate()
}

// aLayout is where a micro-kernel reads A's element (r, p).
type aLayout int

const (
	packed aLayout = iota // a[6p+r]: a packed panel
	inRows                // a[r·lda+p]: six rows of a row-major A in place
	inCols                // a[p·lda+r]: six columns of a row-major Aᵀ in place
)

// gemmKernel emits the micro-kernel
//
//	C[0:mr, 0:nr] = alpha·Σₚ A[p]ᵀ·B[p] + beta·C   (beta == ±0: C is not read)
//
// for mr ≤ 6 rows (packed: 6), where B holds k rows of nr = 2·lanes
// values with row stride ldb elements (b[ldb·p+j]: a packed panel has
// ldb = nr, a row-major B read in place its own row stride) and C is
// row-major with row stride ldc elements. A is laid out as layout says: packed, or read in place, which
// spares packing op(A). In place, the addresses come from two base
// registers indexed by lda and 2·lda: rows 0 and 3 (inRows), or the steps
// 0 and 3 of an unrolled iteration (inCols, whose mr values of a step are
// contiguous). B's rows p of an unrolled iteration are at b, b+ldb, b+2·ldb
// and b+3·ldb. In place, one call computes panels tiles one under the
// other (see below). The Go side checks that the slices are long enough.
func gemmKernel(name string, t prec, layout aLayout, mr int) {
	nr := 2 * t.lanes
	sig := fmt.Sprintf("func(k int, a, b []%[1]s, ldb int, c []%[1]s, ldc int, alpha, beta %[1]s)", t.name)
	doc := fmt.Sprintf("%s computes a %d×%d tile of C = alpha·A·B + beta·C from packed A and rows of B with stride ldb (see gemmKernel in asm/main.go).", name, mr, nr)
	switch layout {
	case inRows:
		sig = fmt.Sprintf("func(k int, a []%[1]s, lda int, b []%[1]s, ldb int, c []%[1]s, ldc int, alpha, beta %[1]s, panels int)", t.name)
		doc = fmt.Sprintf("%s computes panels %d×%d tiles, one under the other, of C = alpha·A·B + beta·C from rows of A in place (A[r, p] = a[r·lda+p]) and rows of B with stride ldb (see gemmKernel in asm/main.go).", name, mr, nr)
	case inCols:
		sig = fmt.Sprintf("func(k int, a []%[1]s, lda int, b []%[1]s, ldb int, c []%[1]s, ldc int, alpha, beta %[1]s, panels int)", t.name)
		doc = fmt.Sprintf("%s computes panels %d×%d tiles, one under the other, of C = alpha·A·B + beta·C from columns of Aᵀ in place (A[r, p] = a[p·lda+r]) and rows of B with stride ldb (see gemmKernel in asm/main.go).", name, mr, nr)
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	// In place, the kernel loops over panels ≥ 1 tiles down C, on the same
	// rows of B: tile q reads A's rows (or Aᵀ's columns) mr·q…mr·q+mr-1
	// and writes the same rows of C. One call per column of tiles, not per
	// tile.
	var panels, aPanel GPVirtual
	if layout != packed {
		panels, aPanel = GP64(), GP64()
		Load(Param("panels"), panels)
		Load(Param("a").Base(), aPanel)
	}
	k, a, b := GP64(), GP64(), GP64()
	c := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(log2(t.size)), ldc)
	ldb := Load(Param("ldb"), GP64())
	SHLQ(U8(log2(t.size)), ldb)
	ldb3 := GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 2}, ldb3)
	// aAt is the address of A's element (r, p) relative to a (and a3),
	// p the step within an unrolled iteration.
	aAt := func(r, p int) Mem { return Mem{Base: a, Disp: (p*mr + r) * t.size} }
	// advance moves a (and a3) on by steps steps.
	advance := func(steps int) { ADDQ(U32(steps*mr*t.size), a) }
	// indexed is the address at offset i·lda (i < 6) from a, plus disp.
	var lda, a3 GPVirtual
	indexed := func(i, disp int) Mem {
		base := a
		if i >= 3 {
			base, i = a3, i-3
		}
		m := Mem{Base: base, Disp: disp}
		if i > 0 {
			m.Index, m.Scale = lda, uint8(i)
		}
		return m
	}
	if layout != packed {
		lda = GP64()
		Load(Param("lda"), lda)
		SHLQ(U8(log2(t.size)), lda)
		a3 = GP64()
	}
	switch layout {
	case inRows:
		aAt = func(r, p int) Mem { return indexed(r, p*t.size) }
		advance = func(steps int) {
			ADDQ(U32(steps*t.size), a)
			ADDQ(U32(steps*t.size), a3)
		}
	case inCols:
		lda4 := GP64()
		MOVQ(lda, lda4)
		SHLQ(U8(2), lda4)
		aAt = func(r, p int) Mem { return indexed(p, r*t.size) }
		advance = func(steps int) {
			by := lda4
			if steps == 1 {
				by = lda
			}
			ADDQ(by, a)
			ADDQ(by, a3)
		}
	}
	// bAt is the address of B's row p of an unrolled iteration, plus disp.
	bAt := func(p, disp int) Mem {
		switch p {
		case 0:
			return Mem{Base: b, Disp: disp}
		case 3:
			return Mem{Base: b, Index: ldb3, Scale: 1, Disp: disp}
		}
		return Mem{Base: b, Index: ldb, Scale: uint8(p), Disp: disp}
	}
	advanceB := func(steps int) {
		if steps == 1 {
			ADDQ(ldb, b)
			return
		}
		LEAQ(Mem{Base: b, Index: ldb, Scale: uint8(steps)}, b)
	}

	// A panel (a tile, in place) starts here: k, a (and a3) and b at the
	// start of their operands.
	Label(name + "_panel")
	Load(Param("k"), k)
	Load(Param("b").Base(), b)
	if layout == packed {
		Load(Param("a").Base(), a)
	} else {
		MOVQ(aPanel, a)
		LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, a3)
		ADDQ(a, a3)
	}
	acc := make([][2]VecPhysical, mr)
	ys := []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11}
	for r := range mr {
		for v := range 2 {
			acc[r][v] = ys[2*r+v]
			t.zero(acc[r][v], acc[r][v], acc[r][v])
		}
	}
	b0, b1, av := Y12, Y13, Y14

	// step multiplies packed column/row p (offsets relative to a and b).
	step := func(p int) {
		t.movu(bAt(p, 0), b0)
		t.movu(bAt(p, 32), b1)
		for r := range mr {
			t.bcast(aAt(r, p), av)
			t.fma(b0, av, acc[r][0])
			t.fma(b1, av, acc[r][1])
		}
	}
	const unroll = 4
	Comment("Four rank-1 updates per iteration, then one at a time.")
	Label(name + "_loop4")
	CMPQ(k, U8(unroll))
	JL(LabelRef(name + "_tail"))
	for p := range unroll {
		step(p)
	}
	advance(unroll)
	advanceB(unroll)
	SUBQ(U8(unroll), k)
	JMP(LabelRef(name + "_loop4"))
	Label(name + "_tail")
	TESTQ(k, k)
	JE(LabelRef(name + "_store"))
	step(0)
	advance(1)
	advanceB(1)
	DECQ(k)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_store")
	Comment("Scale by alpha; add beta·C unless beta is ±0.")
	alpha, beta := Y14, Y15
	t.bcast(addr("alpha"), alpha)
	for r := range mr {
		for v := range 2 {
			t.mul(alpha, acc[r][v], acc[r][v])
		}
	}
	var bits Register = GP64()
	if t.size == 4 {
		bits = GP32()
	}
	t.betaMove(addr("beta"), bits)
	t.betaTest(U8(1), bits)
	JE(LabelRef(name + "_overwrite"))
	t.bcast(addr("beta"), beta)
	for r := range mr {
		for v := range 2 {
			t.fma(Mem{Base: c, Disp: 32 * v}, beta, acc[r][v])
			t.movu(acc[r][v], Mem{Base: c, Disp: 32 * v})
		}
		if r < mr-1 {
			ADDQ(ldc, c)
		}
	}
	JMP(LabelRef(name + "_next"))
	Label(name + "_overwrite")
	for r := range mr {
		for v := range 2 {
			t.movu(acc[r][v], Mem{Base: c, Disp: 32 * v})
		}
		if r < mr-1 {
			ADDQ(ldc, c)
		}
	}
	Label(name + "_next")
	if layout != packed {
		Comment("The next panel: C's row after c's, A's row or column after the panel's.")
		ADDQ(ldc, c)
		switch layout {
		case inRows:
			next := GP64()
			IMUL3Q(U32(mr), lda, next)
			ADDQ(next, aPanel)
		case inCols:
			ADDQ(U32(mr*t.size), aPanel)
		}
		DECQ(panels)
		JNE(LabelRef(name + "_panel"))
	}
	VZEROUPPER()
	RET()
}

// fmaPeak emits a loop of n·24 independent float32 FMAs on twelve YMM
// registers (n·768 FLOP) with no memory operand: the FMA units' peak at
// the clock the core runs now, which BenchmarkFMAPeak measures so that a
// GEMM's efficiency is not taken against the nominal clock.
func fmaPeak() {
	TEXT("fmaPeakAVX2", NOSPLIT, "func(n int)")
	Doc("fmaPeakAVX2 runs n iterations of 24 independent YMM float32 FMAs (see fmaPeak in asm/main.go).")
	n := Load(Param("n"), GP64())
	ys := []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11}
	for _, y := range ys {
		VXORPS(y, y, y)
	}
	VXORPS(Y12, Y12, Y12)
	VXORPS(Y13, Y13, Y13)
	Label("fmapeak_loop")
	TESTQ(n, n)
	JE(LabelRef("fmapeak_done"))
	for range 2 {
		for _, y := range ys {
			VFMADD231PS(Y12, Y13, y)
		}
	}
	DECQ(n)
	JMP(LabelRef("fmapeak_loop"))
	Label("fmapeak_done")
	VZEROUPPER()
	RET()
}

// adam emits the Adam update of train's adamStepGo on the first n - n%4
// elements, with the same IEEE operations in the same order (no FMA), so
// results are bit-identical to the Go loop:
//
//	m ← β1·m + (1-β1)·g,  v ← β2·v + (1-β2)·g²,  θ ← θ - lr·m / (sqrt(v)·s + ε)
func adam() {
	TEXT("adamAVX2", NOSPLIT, "func(p, g, m, v []float64, b1, b2, lr, s, eps float64) int")
	Pragma("noescape")
	Doc("adamAVX2 runs the Adam update on the first len(g) &^ 3 elements and returns that count (see adam in asm/main.go).")
	p := Load(Param("p").Base(), GP64())
	g := Load(Param("g").Base(), GP64())
	m := Load(Param("m").Base(), GP64())
	v := Load(Param("v").Base(), GP64())
	n := Load(Param("g").Len(), GP64())
	ANDQ(I32(^3), n)
	i := GP64()
	XORQ(i, i)
	B1, C1, B2, C2, LR, S, EPS := YMM(), YMM(), YMM(), YMM(), YMM(), YMM(), YMM()
	VBROADCASTSD(addr("b1"), B1)
	VBROADCASTSD(addr("b2"), B2)
	VBROADCASTSD(addr("lr"), LR)
	VBROADCASTSD(addr("s"), S)
	VBROADCASTSD(addr("eps"), EPS)
	one := YMM()
	// The bits of 1.0: avo prints F64(1) as the integer 1.
	VBROADCASTSD(ConstData("one", U64(math.Float64bits(1))), one)
	VSUBPD(B1, one, C1)
	VSUBPD(B2, one, C2)
	at := func(base Register) Mem { return Mem{Base: base, Index: i, Scale: 8} }
	Label("adam_loop")
	CMPQ(i, n)
	JGE(LabelRef("adam_done"))
	gi, mi, vi, t1, t2 := YMM(), YMM(), YMM(), YMM(), YMM()
	VMOVUPD(at(g), gi)
	// mi = B1·m + C1·g
	VMULPD(at(m), B1, mi)
	VMULPD(gi, C1, t1)
	VADDPD(t1, mi, mi)
	// vi = B2·v + C2·(g·g)
	VMULPD(at(v), B2, vi)
	VMULPD(gi, gi, t1)
	VMULPD(t1, C2, t1)
	VADDPD(t1, vi, vi)
	VMOVUPD(mi, at(m))
	VMOVUPD(vi, at(v))
	// p -= (LR·mi) / (sqrt(vi)·S + EPS)
	VSQRTPD(vi, t1)
	VMULPD(S, t1, t1)
	VADDPD(EPS, t1, t1)
	VMULPD(mi, LR, t2)
	VDIVPD(t1, t2, t2)
	VMOVUPD(at(p), t1)
	VSUBPD(t2, t1, t1)
	VMOVUPD(t1, at(p))
	ADDQ(U8(4), i)
	JMP(LabelRef("adam_loop"))
	Label("adam_done")
	Store(n, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// convert emits float64→float32 and float32→float64 conversion of the
// first n - n%8 elements of min(len(dst), len(src)), returning that count.
func convert() {
	// float64 → float32: two VCVTPD2PSY per 8 elements.
	elementwise("narrowAVX2", "func(dst []float32, src []float64) int",
		"narrowAVX2 converts src to float32 into dst for the first min(len) &^ 7 elements and returns that count.",
		"narrow", 8, func(dst, src, i Register) {
			x0, x1 := XMM(), XMM()
			VCVTPD2PSY(Mem{Base: src, Index: i, Scale: 8}, x0)
			VCVTPD2PSY(Mem{Base: src, Index: i, Scale: 8, Disp: 32}, x1)
			VMOVUPS(x0, Mem{Base: dst, Index: i, Scale: 4})
			VMOVUPS(x1, Mem{Base: dst, Index: i, Scale: 4, Disp: 16})
		})
	// float32 → float64: two VCVTPS2PD per 8 elements.
	elementwise("widenAVX2", "func(dst []float64, src []float32) int",
		"widenAVX2 converts src to float64 into dst for the first min(len) &^ 7 elements and returns that count.",
		"widen", 8, func(dst, src, i Register) {
			y0, y1 := YMM(), YMM()
			VCVTPS2PD(Mem{Base: src, Index: i, Scale: 4}, y0)
			VCVTPS2PD(Mem{Base: src, Index: i, Scale: 4, Disp: 16}, y1)
			VMOVUPD(y0, Mem{Base: dst, Index: i, Scale: 8})
			VMOVUPD(y1, Mem{Base: dst, Index: i, Scale: 8, Disp: 32})
		})
}

// elementwise emits the function name (signature sig, documented by doc)
// of two slices dst and src that runs body on elements i…i+step-1 for i
// = 0, step, 2·step, … below min(len(dst), len(src)) rounded down to a
// multiple of step (a power of two) and returns that count; label
// prefixes its loop's labels.
func elementwise(name, sig, doc, label string, step int, body func(dst, src, i Register)) {
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	dst := Load(Param("dst").Base(), GP64())
	src := Load(Param("src").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	ns := Load(Param("src").Len(), GP64())
	CMPQ(ns, n)
	CMOVQLT(ns, n)
	ANDQ(I32(int32(^(step - 1))), n)
	i := GP64()
	XORQ(i, i)
	Label(label + "_loop")
	CMPQ(i, n)
	JGE(LabelRef(label + "_done"))
	body(dst, src, i)
	ADDQ(U8(step), i)
	JMP(LabelRef(label + "_loop"))
	Label(label + "_done")
	Store(n, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}

// addr is the memory operand of a scalar parameter.
func addr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// add emits dst += src over the first n - n%16 elements of
// min(len(dst), len(src)), returning that count: the sum of a batch's
// parts' float32 gradients (train's vecSum32).
func add() {
	elementwise("addAVX2", "func(dst, src []float32) int",
		"addAVX2 adds src into dst for the first min(len) &^ 15 elements and returns that count.",
		"add", 16, func(dst, src, i Register) {
			y0, y1 := YMM(), YMM()
			// dst + src, the order of Go's dst[i] += src[i] (IEEE
			// addition commutes anyway)
			VMOVUPS(Mem{Base: dst, Index: i, Scale: 4}, y0)
			VMOVUPS(Mem{Base: dst, Index: i, Scale: 4, Disp: 32}, y1)
			VADDPS(Mem{Base: src, Index: i, Scale: 4}, y0, y0)
			VADDPS(Mem{Base: src, Index: i, Scale: 4, Disp: 32}, y1, y1)
			VMOVUPS(y0, Mem{Base: dst, Index: i, Scale: 4})
			VMOVUPS(y1, Mem{Base: dst, Index: i, Scale: 4, Disp: 32})
		})
}
