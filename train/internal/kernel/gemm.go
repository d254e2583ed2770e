package kernel

import (
	"fmt"
	"sync"
	"unsafe"

	"gonum.org/v1/gonum/blas"
)

// Float is the element type of a GEMM.
type Float interface{ ~float32 | ~float64 }

// micro computes one mr×nr tile of C = alpha·A·B + beta·C from k packed
// columns of A (a[mr·p+r]) and k rows of B with row stride ldb (b[ldb·p+j]:
// a packed panel has ldb = nr, a row-major B read in place its own
// stride); C is row-major with row stride ldc. beta == 0 means C is not
// read.
type micro[T Float] func(k int, a, b []T, ldb int, c []T, ldc int, alpha, beta T)

// microInPlace is micro reading op(A) where it lies, with stride lda:
// rows of a row-major A (a[r·lda+p]) or columns of a row-major Aᵀ
// (a[p·lda+r]), instead of a packed panel; it computes panels ≥ 1 tiles
// one under the other (mr·panels rows of op(A) and C) on the same rows of
// B, so that a column of tiles costs one call.
type microInPlace[T Float] func(k int, a []T, lda int, b []T, ldb int, c []T, ldc int, alpha, beta T, panels int)

// gemmKernel is one micro-kernel with its tile and block sizes: kc rows of
// op(B) and mc rows of op(A) are packed at a time (mc a multiple of mr).
// rows and cols, if set, compute whole tiles of a non-transposed or
// transposed op(A) without packing it: only a last panel of fewer than mr
// rows is packed, unless rowsEdge or colsEdge has a kernel for its height.
type gemmKernel[T Float] struct {
	f              micro[T]
	rows, cols     microInPlace[T]
	mr, nr, kc, mc int
	// rowsEdge[r] and colsEdge[r], if set, are rows and cols for a last
	// panel of r < mr rows: it is then read in place too, not packed and
	// computed as a whole tile.
	rowsEdge, colsEdge [6]microInPlace[T]
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32
// matrices: op(A) is m×k, op(B) is k×n and C is m×n, with row strides
// lda, ldb and ldc; op(X) is X or Xᵀ as tX says. beta == 0 means C is
// not read (NaNs in C are overwritten). It panics, as blas.Sgemm does, on
// negative sizes or slices too short for them.
func Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm(&impl.s, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is Sgemm for float64.
func Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gemm(&impl.d, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmSerial is Sgemm computed on the calling goroutine only, for callers
// that split their own work across the cores. Its results are those of
// Sgemm: a split of C never changes how an element is summed.
func SgemmSerial(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmParts(&impl.s, 1, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// DgemmSerial is SgemmSerial for float64.
func DgemmSerial(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gemmParts(&impl.d, 1, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Scratch is the packing space of one goroutine's serial products
// (SgemmSerialIn, DgemmSerialIn), kept by a caller that splits its own
// work with the rest of that work's scratch, so that its products take
// nothing from the shared pool (whose per-CPU lists allocate now and then
// when goroutines move between CPUs). The zero Scratch is ready to use;
// it grows to the largest product's packing space.
type Scratch[T Float] struct{ s scratch[T] }

// SgemmSerialIn is SgemmSerial packing into s, which only one goroutine
// may use at a time.
func SgemmSerialIn(s *Scratch[float32], tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmIn(&impl.s, &s.s, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// DgemmSerialIn is SgemmSerialIn for float64.
func DgemmSerialIn(s *Scratch[float64], tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gemmIn(&impl.d, &s.s, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmIn checks the arguments, then runs the product on the calling
// goroutine, packing into s (nil: a scratch from the pool).
func gemmIn[T Float](kn *gemmKernel[T], s *scratch[T], tA, tB blas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	ta, tb, done := gemmStart(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	if done {
		return
	}
	if s != nil {
		gemmSerial(kn, s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	s = getScratch[T]()
	gemmSerial(kn, s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	putScratch(s)
}

// gemm checks the arguments, then runs the product serially or split
// across the worker pool.
func gemm[T Float](kn *gemmKernel[T], tA, tB blas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmParts(kn, parallelism(m, n, k), tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmParts is gemm split into at most parts parts.
func gemmParts[T Float](kn *gemmKernel[T], parts int, tA, tB blas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if parts <= 1 {
		gemmIn(kn, nil, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	ta, tb, done := gemmStart(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	if done {
		return
	}
	g := getCall[T]()
	g.kn, g.ta, g.tb, g.m, g.n, g.k, g.alpha, g.beta = kn, ta, tb, m, n, k, alpha, beta
	g.a, g.lda, g.b, g.ldb, g.c, g.ldc = a, lda, b, ldb, c, ldc
	// Split the longer side of C, in whole tiles: splitting rows packs
	// op(B) once per part, splitting columns packs op(A) once per part.
	g.rows = m >= n
	side, unit := n, kn.nr
	if g.rows {
		side, unit = m, kn.mr
	}
	g.step = (side + parts - 1) / parts
	g.step = (g.step + unit - 1) / unit * unit
	parts = (side + g.step - 1) / g.step
	runParts(g, parts)
	putCall(g)
}

// gemmStart checks the arguments (checkGemm) and computes the products
// that need no packing (an empty C, or C = beta·C); done reports that it
// did.
func gemmStart[T Float](tA, tB blas.Transpose, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) (ta, tb, done bool) {
	ta, tb = checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return ta, tb, true
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return ta, tb, true
	}
	return ta, tb, false
}

// checkGemm panics on arguments that break the BLAS contract and returns
// the transposes as booleans.
func checkGemm(tA, tB blas.Transpose, m, n, k, la, lda, lb, ldb, lc, ldc int) (ta, tb bool) {
	ta, tb = tA != blas.NoTrans, tB != blas.NoTrans
	if tA != blas.NoTrans && tA != blas.Trans && tA != blas.ConjTrans || tB != blas.NoTrans && tB != blas.Trans && tB != blas.ConjTrans {
		panic(fmt.Sprintf("kernel: bad transpose %v, %v", tA, tB))
	}
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel: negative size %d×%d×%d", m, n, k))
	}
	ar, ac := m, k
	if ta {
		ar, ac = k, m
	}
	br, bc := k, n
	if tb {
		br, bc = n, k
	}
	if lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) {
		panic(fmt.Sprintf("kernel: bad stride lda %d, ldb %d, ldc %d for %d×%d×%d", lda, ldb, ldc, m, n, k))
	}
	short := func(l, rows, cols, ld int) bool { return rows > 0 && cols > 0 && l < (rows-1)*ld+cols }
	if short(la, ar, ac, lda) || short(lb, br, bc, ldb) || short(lc, m, n, ldc) {
		panic(fmt.Sprintf("kernel: short slice: len(a) %d, len(b) %d, len(c) %d for %d×%d×%d", la, lb, lc, m, n, k))
	}
	return ta, tb
}

// scale sets C = beta·C (C = 0 for beta == 0).
func scale[T Float](m, n int, beta T, c []T, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// scratch is one goroutine's packing space.
type scratch[T Float] struct {
	a, b []T
	tile []T // an overhanging tile
}

var scratchPools = struct{ s, d sync.Pool }{}

func getScratch[T Float]() *scratch[T] {
	p := scratchPool[T]()
	if s, ok := p.Get().(*scratch[T]); ok {
		return s
	}
	return new(scratch[T])
}

func putScratch[T Float](s *scratch[T]) { scratchPool[T]().Put(s) }

func scratchPool[T Float]() *sync.Pool {
	var z T
	if _, ok := any(z).(float32); ok {
		return &scratchPools.s
	}
	return &scratchPools.d
}

// grow returns s[:n], reallocated if too small.
func grow[T Float](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// maxDirectBSpan is the most bytes a k block of a B read in place may
// span (kc rows of its stride): beyond it, packing B costs less than the
// pages a panel's rows would touch.
const maxDirectBSpan = 256 << 10

// gemmSerial computes C = alpha·op(A)·op(B) + beta·C on the calling
// goroutine, for arguments checkGemm accepted with m, n, k, alpha ≠ 0.
func gemmSerial[T Float](kn *gemmKernel[T], s *scratch[T], ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	mr, nr := kn.mr, kn.nr
	blocks := (k + kn.kc - 1) / kn.kc
	kc := (k + blocks - 1) / blocks // at most kn.kc, evened out: k = 784 is 4×196, not 3×256 and a 16
	mc := min(kn.mc, (m+mr-1)/mr*mr)
	ncPad := (n + nr - 1) / nr * nr
	s.a = grow(s.a, mc*kc)
	s.b = grow(s.b, kc*ncPad)
	s.tile = grow(s.tile, mr*nr)
	inPlace, edges := kn.rows, &kn.rowsEdge // op(A)'s whole panels are read where they lie, if not nil
	if ta {
		inPlace, edges = kn.cols, &kn.colsEdge
	}
	// A non-transposed B's whole panels are read where they lie too, when
	// a k block of its rows spans few enough pages; only a last panel of
	// fewer than nr columns is packed.
	var z T
	directB := !tb && kc*ldb*int(unsafe.Sizeof(z)) <= maxDirectBSpan
	fullN := n / nr * nr // columns in whole panels
	for pc := 0; pc < k; pc += kc {
		kb := min(kc, k-pc)
		bet := beta
		if pc > 0 {
			bet = 1
		}
		switch {
		case !directB:
			packB(s.b, b, ldb, tb, pc, kb, n, nr)
		case fullN < n:
			packB(s.b[fullN*kb:], b[fullN:], ldb, false, pc, kb, n-fullN, nr)
		}
		for ic := 0; ic < m; ic += mc {
			mb := min(mc, m-ic)
			full := mb / mr * mr     // rows in whole panels
			var edge microInPlace[T] // the last, partial panel's in-place kernel, if any
			if inPlace != nil && full < mb {
				edge = edges[mb-full]
			}
			switch {
			case inPlace == nil:
				packA(s.a, a, lda, ta, ic, mb, pc, kb, mr)
			case full < mb && edge == nil: // the last, partial panel only, at s.a[full·kb:]
				packA(s.a[full*kb:], a, lda, ta, ic+full, mb-full, pc, kb, mr)
			}
			for jr := 0; jr < n; jr += nr {
				cols := min(nr, n-jr)
				bp, bs := s.b[jr*kb:(jr+nr)*kb], nr
				if directB && cols == nr {
					bp, bs = b[pc*ldb+jr:], ldb
				}
				ir0 := 0 // the first panel left to the loop below
				if inPlace != nil && cols == nr && full > 0 {
					// the column's whole panels in one call
					inPlace(kb, aFrom(a, lda, ta, ic, pc), lda, bp, bs, c[ic*ldc+jr:], ldc, alpha, bet, full/mr)
					ir0 = full
				}
				for ir := ir0; ir < mb; ir += mr {
					rows := min(mr, mb-ir)
					ap := s.a[ir*kb : (ir+mr)*kb]
					ci := (ic+ir)*ldc + jr
					direct := inPlace // the panel's in-place kernel; nil: packed
					if rows < mr {
						direct = edge
					}
					var ar []T // the panel's first element, where direct
					if direct != nil {
						ar = aFrom(a, lda, ta, ic+ir, pc)
					}
					if cols == nr && (rows == mr || direct != nil) { // C's rows, as many as the panel's
						if direct != nil {
							direct(kb, ar, lda, bp, bs, c[ci:], ldc, alpha, bet, 1)
						} else {
							kn.f(kb, ap, bp, bs, c[ci:], ldc, alpha, bet)
						}
						continue
					}
					if direct != nil {
						direct(kb, ar, lda, bp, bs, s.tile, nr, alpha, 0, 1)
					} else {
						kn.f(kb, ap, bp, bs, s.tile, nr, alpha, 0)
					}
					for r := range rows {
						dst, src := c[ci+r*ldc:ci+r*ldc+cols], s.tile[r*nr:r*nr+cols]
						if bet == 0 {
							copy(dst, src)
							continue
						}
						for j, v := range src {
							dst[j] = v + bet*dst[j]
						}
					}
				}
			}
		}
	}
}

// aFrom returns op(A) from its element (i, p) on, as the in-place kernels
// read it: a row-major A's row i from column p, or a row-major Aᵀ's row p
// from column i.
func aFrom[T Float](a []T, lda int, ta bool, i, p int) []T {
	if ta {
		return a[p*lda+i:]
	}
	return a[i*lda+p:]
}

// packA writes rows i0…i0+mb-1, columns p0…p0+kb-1 of op(A) into dst as
// panels of mr rows (panel q at dst[q·mr·kb:], element (r, p) at
// [p·mr+r]), padding the last panel with zeros.
func packA[T Float](dst, a []T, lda int, ta bool, i0, mb, p0, kb, mr int) {
	for ir := 0; ir < mb; ir += mr {
		rows := min(mr, mb-ir)
		d := dst[ir*kb : (ir+mr)*kb]
		if ta && rows == 6 && mr == 6 { // the AVX2 tile, without a copy call per six values
			for p := range kb {
				src := a[(p0+p)*lda+i0+ir:][:6:6]
				dp := d[6*p : 6*p+6 : 6*p+6]
				dp[0], dp[1], dp[2], dp[3], dp[4], dp[5] = src[0], src[1], src[2], src[3], src[4], src[5]
			}
			continue
		}
		if ta { // op(A)[i, p] = a[p·lda + i]: mr contiguous values per p
			for p := range kb {
				src := a[(p0+p)*lda+i0+ir:]
				dp := d[p*mr : p*mr+mr]
				copy(dp, src[:rows])
				clear(dp[rows:])
			}
			continue
		}
		if rows == 6 && mr == 6 { // the AVX2 tile: six rows read in step, written in order
			row := func(r int) []T { return a[(i0+ir+r)*lda+p0:][:kb:kb] }
			r0, r1, r2, r3, r4, r5 := row(0), row(1), row(2), row(3), row(4), row(5)
			for p := range kb {
				dp := d[6*p : 6*p+6 : 6*p+6]
				dp[0], dp[1], dp[2], dp[3], dp[4], dp[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
			}
			continue
		}
		for r := range rows { // op(A)[i, p] = a[i·lda + p]
			src := a[(i0+ir+r)*lda+p0:]
			src = src[:kb]
			for p, v := range src {
				d[p*mr+r] = v
			}
		}
		for r := rows; r < mr; r++ {
			for p := range kb {
				d[p*mr+r] = 0
			}
		}
	}
}

// packB writes rows p0…p0+kb-1, all n columns of op(B) into dst as panels
// of nr columns (panel q at dst[q·nr·kb:], element (p, j) at [p·nr+j]),
// padding the last panel with zeros.
func packB[T Float](dst, b []T, ldb int, tb bool, p0, kb, n, nr int) {
	for jr := 0; jr < n; jr += nr {
		cols := min(nr, n-jr)
		d := dst[jr*kb : (jr+nr)*kb]
		if !tb && cols == 16 && nr == 16 { // the AVX2 float32 tile: one 64-byte move per p, no copy call
			for p := range kb {
				*(*[16]T)(d[p*16:]) = *(*[16]T)(b[(p0+p)*ldb+jr:])
			}
			continue
		}
		if !tb && cols == 8 && nr == 8 { // the AVX2 float64 tile
			for p := range kb {
				*(*[8]T)(d[p*8:]) = *(*[8]T)(b[(p0+p)*ldb+jr:])
			}
			continue
		}
		if !tb { // op(B)[p, j] = b[p·ldb + j]: nr contiguous values per p
			for p := range kb {
				src := b[(p0+p)*ldb+jr:]
				dp := d[p*nr : p*nr+nr]
				copy(dp, src[:cols])
				clear(dp[cols:])
			}
			continue
		}
		if cols == nr && (nr == 16 || nr == 8) { // the AVX2 tiles: nr rows of b read in step, written in order
			var rs [16][]T
			for j := range nr {
				rs[j] = b[(jr+j)*ldb+p0:][:kb:kb]
			}
			if nr == 8 {
				r0, r1, r2, r3, r4, r5, r6, r7 := rs[0], rs[1], rs[2], rs[3], rs[4], rs[5], rs[6], rs[7]
				for p := range kb {
					dp := (*[8]T)(d[8*p:])
					dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p], r6[p], r7[p]
				}
				continue
			}
			for h := 0; h < 16; h += 8 { // eight rows at a time: sixteen slices would spill
				r0, r1, r2, r3, r4, r5, r6, r7 := rs[h], rs[h+1], rs[h+2], rs[h+3], rs[h+4], rs[h+5], rs[h+6], rs[h+7]
				for p := range kb {
					dp := (*[8]T)(d[16*p+h:])
					dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p], r6[p], r7[p]
				}
			}
			continue
		}
		for j := range cols { // op(B)[p, j] = b[j·ldb + p]
			src := b[(jr+j)*ldb+p0:]
			src = src[:kb]
			for p, v := range src {
				d[p*nr+j] = v
			}
		}
		for j := cols; j < nr; j++ {
			for p := range kb {
				d[p*nr+j] = 0
			}
		}
	}
}
