package kernel

import (
	"runtime"
	"sync"
)

// parallelMin is the number of multiply-adds (m·n·k) from which a product
// is split across the pool: below it, handing a part to another core costs
// more than it saves. On the 2-core machine of the issue #19 measurements
// (shared with other work) two parts were slower than one at 1M
// multiply-adds (128×128×64) and about even to 1.2× faster at 12.8M
// (BenchmarkParallel in this package), so only the MLP's two large
// products split.
const parallelMin = 1 << 21

// maxWorkers bounds the pool.
const maxWorkers = 64

// parallelism is the number of parts to split an m×n×k product into.
func parallelism(m, n, k int) int {
	work := m * n * k
	if work < parallelMin {
		return 1
	}
	p := min(runtime.GOMAXPROCS(0), runtime.NumCPU(), maxWorkers+1, work/(parallelMin/2))
	return max(p, 1)
}

// part is a unit of work handed to the pool.
type part interface {
	// run does part i, then marks it done.
	run(i int)
}

type task struct {
	p part
	i int
}

// pool is the process's worker goroutines, started on first use. They run
// for the life of the process, parked on tasks when idle.
var pool struct {
	once  sync.Once
	tasks chan task
}

func startPool() {
	n := min(runtime.NumCPU()-1, maxWorkers)
	pool.tasks = make(chan task, max(n, 0))
	for range n {
		go func() {
			for t := range pool.tasks {
				t.p.run(t.i)
			}
		}()
	}
}

// gemmCall is one product split into parts along rows or columns of C,
// step rows or columns each.
type gemmCall[T Float] struct {
	kn            *gemmKernel[T]
	ta, tb        bool
	m, n, k       int
	alpha, beta   T
	a, b, c       []T
	lda, ldb, ldc int
	rows          bool
	step          int
	wg            sync.WaitGroup
}

// runParts runs parts 1… on the pool (or here, when every worker is busy)
// and part 0 here, and returns when all are done.
func runParts[T Float](g *gemmCall[T], parts int) {
	pool.once.Do(startPool)
	g.wg.Add(parts)
	for i := 1; i < parts; i++ {
		select {
		case pool.tasks <- task{g, i}:
		default:
			g.run(i)
		}
	}
	g.run(0)
	g.wg.Wait()
}

func (g *gemmCall[T]) run(i int) {
	defer g.wg.Done()
	lo := i * g.step
	a, b, c := g.a, g.b, g.c
	m, n := g.m, g.n
	if g.rows {
		m = min(g.step, g.m-lo)
		if g.ta {
			a = a[lo:]
		} else {
			a = a[lo*g.lda:]
		}
		c = c[lo*g.ldc:]
	} else {
		n = min(g.step, g.n-lo)
		if g.tb {
			b = b[lo*g.ldb:]
		} else {
			b = b[lo:]
		}
		c = c[lo:]
	}
	s := getScratch[T]()
	gemmSerial(g.kn, s, g.ta, g.tb, m, n, g.k, g.alpha, a, g.lda, b, g.ldb, g.beta, c, g.ldc)
	putScratch(s)
}

var callPools = struct{ s, d sync.Pool }{}

func getCall[T Float]() *gemmCall[T] {
	p := callPool[T]()
	if g, ok := p.Get().(*gemmCall[T]); ok {
		return g
	}
	return new(gemmCall[T])
}

// putCall drops g's references to the caller's matrices and pools it.
func putCall[T Float](g *gemmCall[T]) {
	g.a, g.b, g.c, g.kn = nil, nil, nil, nil
	callPool[T]().Put(g)
}

func callPool[T Float]() *sync.Pool {
	var z T
	if _, ok := any(z).(float32); ok {
		return &callPools.s
	}
	return &callPools.d
}
